package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/pool"
)

// loop runs steps until total_steps (or stop_after_steps more, or a
// signal), with checkpoints; step does the algorithm's work; evaluation
// may read evalPool (LANPO's pool; nil: none).
func (s *session) loop(ctx context.Context, step func(*phaseTimer) (StepMetrics, error), evalPool *pool.Pool) error {
	cfg := s.cfg
	ran := 0
	if s.evaluate != nil && cfg.Eval.Every > 0 {
		if err := s.evaluate.Check(s.m, s.tk); err != nil {
			return ConfigError{err}
		}
	}
	started := time.Now()
	defer func() { s.prog.Done(fmt.Sprintf("step %d", s.state.Step)) }()
	for s.state.Step < cfg.TotalSteps {
		if cfg.StopAfterSteps > 0 && ran == cfg.StopAfterSteps {
			log.Info().Int("step", s.state.Step).Msg("stop_after_steps reached")
			break
		}
		// A signal on any rank stops every rank at the same step.
		stop, err := dist.AnyRank(s.comm, ctx.Err() != nil)
		if err != nil {
			return fmt.Errorf("before step %d: %w", s.state.Step+1, err)
		}
		if stop {
			if err := s.save(); err != nil {
				return err
			}
			return ErrInterrupted
		}
		t := newDevicePhaseTimer(s.m.Device.IsCuda())
		t.hb, t.step = s.hb, s.state.Step+1
		before, updates := s.state, s.opt.Updates()
		met, err := s.guardedStep(step, t)
		if err != nil && !errors.Is(err, optim.ErrBadLoss) {
			return s.stepFailed(err, t.phase, before, updates)
		}
		if errors.Is(err, optim.ErrBadLoss) {
			s.opt.ZeroGrad()
			s.state.BadSteps++
			s.state.Skipped++
			met.Skipped = true
			log.Warn().Int("step", s.state.Step+1).Int("in_a_row", s.state.BadSteps).Msg("NaN/Inf loss or gradient: update skipped")
			if s.state.BadSteps >= cfg.MaxBadSteps {
				return s.stepFailed(fmt.Errorf("%d steps in a row with NaN/Inf loss (max_bad_steps %d)", s.state.BadSteps, cfg.MaxBadSteps), t.phase, before, updates)
			}
		} else if !met.Skipped {
			s.state.BadSteps = 0
		}
		s.state.Step++
		ran++
		met.Step = s.state.Step
		met.Seconds = t.secs
		total := t.total()
		if total > 0 {
			met.TokensPerS = float64(met.Tokens) / total
		}
		if s.evaluate != nil && cfg.Eval.Every > 0 && s.state.Step%cfg.Eval.Every == 0 {
			start := time.Now()
			s.hb.enter(s.state.Step, "eval", start)
			res, err := s.evaluate.Evaluate(s.state.Step, s.m, s.tk, evalPool)
			if err != nil {
				return fmt.Errorf("evaluation after step %d: %w", s.state.Step, err)
			}
			met.Eval, met.Seconds["eval"] = res, time.Since(start).Seconds()
		}
		// Metrics first: the checkpoint keeps the series up to its step.
		if err := s.metrics.write(met); err != nil {
			return err
		}
		if cfg.Checkpoint.Every > 0 && s.state.Step%cfg.Checkpoint.Every == 0 {
			s.hb.enter(s.state.Step, "checkpoint", time.Now())
			if err := s.save(); err != nil {
				return err
			}
		}
		s.hb.enter(s.state.Step, "", time.Now())
		s.prog.Update(met.Step, fmt.Sprintf("loss %.4f reward %.3f acc %.3f %.0f tok/s", met.Loss, met.RewardMean, met.Accuracy, met.TokensPerS))
		s.stepLine(met, time.Since(started)/time.Duration(ran))
	}
	if s.noFinalSave {
		return nil
	}
	return s.save()
}

// stepLine logs one line per step where no progress bar shows (no
// terminal: Slurm, nohup, tail -f): step, reward, accuracy, seconds per
// step and the time left at this pace; with a progress bar, at debug level.
func (s *session) stepLine(met StepMetrics, perStep time.Duration) {
	if s.comm.Rank() != 0 {
		return
	}
	ev := log.Debug()
	if !s.prog.Shown() {
		ev = log.Info()
	}
	left := time.Duration(s.cfg.TotalSteps-met.Step) * perStep
	ev.Str("step", fmt.Sprintf("%d/%d", met.Step, s.cfg.TotalSteps)).Float64("reward", round3(met.RewardMean)).Float64("accuracy", round3(met.Accuracy)).
		Float64("loss", met.Loss).Float64("s_per_step", round3(perStep.Seconds())).Str("eta", left.Round(time.Second).String())
	if met.RewardErrors > 0 {
		ev = ev.Int("reward_errors", met.RewardErrors)
	}
	ev.Msg("step")
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// guardedStep runs one step, turning a panic into an error.
func (s *session) guardedStep(step func(*phaseTimer) (StepMetrics, error), t *phaseTimer) (met StepMetrics, err error) {
	defer tensor.Recover("panic", &err)
	return step(t)
}

// stepFailed handles a step that returned an error in phase. If the
// optimizer has not updated the weights (the error came in rollout,
// scoring, reference log-probs or backward), the run's state is still the
// one after the last good step once the data cursor is put back: it is
// saved (unless already saved), so nothing finished is lost. After an
// update has begun the weights are partly new and the state is not saved;
// the last checkpoint is where to resume.
func (s *session) stepFailed(err error, phase string, before TrainerState, updates int64) error {
	err = fmt.Errorf("step %d, phase %s: %w", s.state.Step+1, phase, err)
	if s.comm.Size() > 1 {
		// The other ranks may be anywhere in the step: saving would need
		// collectives they are not issuing. The last checkpoint stands.
		log.Error().Int("rank", s.comm.Rank()).Int("step", s.state.Step+1).Msg("the step failed on this rank of a multi-process run: not saving; resume from the last checkpoint")
		return fmt.Errorf("rank %d: %w", s.comm.Rank(), err)
	}
	if s.opt.Updates() != updates {
		log.Error().Int("step", s.state.Step+1).Msg("the step failed after the optimizer had updated the weights: not saving them; resume from the last checkpoint")
		return err
	}
	s.state = before
	if serr := s.save(); serr != nil {
		return fmt.Errorf("%w (and saving the state of step %d failed: %v)", err, s.state.Step, serr)
	}
	return fmt.Errorf("%w (the state after step %d is in %s)", err, s.state.Step, filepath.Join(s.cfg.RunDir, checkpointsDir, checkpointName(s.state.Step)))
}

// save writes a checkpoint of the current step unless one exists.
func (s *session) save() error {
	if s.lastSave == s.state.Step {
		return nil
	}
	dir, err := SaveCheckpoint(s.cfg.RunDir, checkpointParts{s.m, s.tokFiles, s.opt, s.state, s.saveExtra, s.comm, []byte(s.configYAML), s.adapterBase()}, s.cfg.Checkpoint.Keep)
	if err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", s.state.Step, err)
	}
	s.lastSave = s.state.Step
	log.Info().Str("dir", dir).Int("step", s.state.Step).Msg("checkpoint saved")
	return nil
}
