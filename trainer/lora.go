package trainer

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/model"
)

// LoRA in a run (docs/lora.md): the base stays frozen and is loaded from
// the run's model directory, also on a resume; the adapters are fresh
// (lora.init), from lora.init_from, or the checkpoint's; the optimizer
// holds them alone, so data parallelism all-reduces only their gradients
// and ZeRO shards only their state; checkpoints hold them in PEFT's format;
// the KL term's reference is the same model with the adapters off (or, from
// lora.init_from, at their initial values).

// attachLoRA gives the session's model its adapters. ckpt is the checkpoint
// resumed from ("" for none); withInitial keeps lora.init_from's adapter
// for the KL reference.
func (s *session) attachLoRA(ckpt string, withInitial bool) error {
	c := s.cfg.LoRA
	switch {
	case ckpt != "":
		if !model.IsAdapterDir(ckpt) {
			return ConfigError{fmt.Errorf("--resume %s: the checkpoint holds no LoRA adapter (%s): it was written by a run without LoRA", ckpt, model.AdapterConfigFile)}
		}
		if err := s.m.LoadAdapter(ckpt); err != nil {
			return err
		}
		if withInitial {
			if err := s.m.LoadInitialAdapter(c.InitFrom); err != nil {
				return fmt.Errorf("config key lora.init_from (the KL reference): %w", err)
			}
		}
	case c.InitFrom != "":
		if err := s.m.LoadAdapter(c.InitFrom); err != nil {
			return ConfigError{fmt.Errorf("config key lora.init_from: %w", err)}
		}
		if err := agreesWithInit(c, s.m.LoRA().Config); err != nil {
			return ConfigError{err}
		}
		if withInitial {
			if err := s.m.KeepInitial(); err != nil {
				return err
			}
		}
	default:
		if err := s.m.AddLoRA(c, int64(s.cfg.Seed)); err != nil {
			return err
		}
	}
	// Dropout is the run's choice, whatever the adapter was trained with.
	s.m.LoRA().Config.Dropout = c.Dropout
	var trainable, frozen int64
	for _, p := range s.m.LoRA().Params() {
		trainable += int64(p.Tensor.Numel())
	}
	for _, p := range s.m.Params() {
		frozen += int64(p.Tensor.Numel())
	}
	lc := s.m.LoRA().Config
	ev := log.Info().Int("r", lc.R).Float64("alpha", lc.Alpha).Float64("scale", s.m.LoRA().Scale()).Strs("target_modules", lc.TargetModules).
		Int64("trainable_params", trainable).Int64("frozen_params", frozen)
	if s.comm.Size() > 1 {
		ev = ev.Float64("allreduce_mb_per_step", float64(4*trainable)/(1<<20))
	}
	ev.Msg("LoRA: the base is frozen, the adapters train")
	return nil
}

// agreesWithInit checks the lora keys a config sets against the adapter
// lora.init_from holds (its rank, alpha, targets and rsLoRA are the run's).
func agreesWithInit(c, file model.LoRAConfig) error {
	where := filepath.Join(c.InitFrom, model.AdapterConfigFile)
	switch {
	case c.R != 0 && c.R != file.R:
		return fmt.Errorf("config key lora.r: %d, but lora.init_from's %s has r %d (leave it unset)", c.R, where, file.R)
	case c.Alpha != 0 && c.Alpha != file.Alpha:
		return fmt.Errorf("config key lora.alpha: %g, but lora.init_from's %s has lora_alpha %g (leave it unset)", c.Alpha, where, file.Alpha)
	case len(c.TargetModules) > 0 && !slices.Equal(c.TargetModules, file.TargetModules):
		return fmt.Errorf("config key lora.target_modules: %v, but lora.init_from's %s has %v (leave it unset)", c.TargetModules, where, file.TargetModules)
	case c.UseRSLoRA && !file.UseRSLoRA:
		return fmt.Errorf("config key lora.use_rslora: true, but lora.init_from's %s has use_rslora false", where)
	}
	return nil
}

// adapterBase is what a checkpoint's adapter_config.json names as its base
// model: the run's model directory, absolute, so that lanpo eval --model
// CKPT and PEFT find it from anywhere on this machine.
func (s *session) adapterBase() string {
	if abs, err := filepath.Abs(s.modelDir); err == nil {
		return abs
	}
	return s.modelDir
}
