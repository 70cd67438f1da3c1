package main

import (
	"fmt"

	"github.com/rs/zerolog/log"
	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/trainer"
)

// modelFlags are the flags of every command that loads a model directory.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Required: true, Usage: "Hugging Face model directory (or a LoRA run's checkpoint: its base model comes from adapter_config.json)"},
		adapterFlag,
		&cli.StringFlag{Name: "device", Value: "auto", Usage: "auto (the GPU where this build and machine have one, else cpu), cpu or cuda[:N]"},
		&cli.StringFlag{Name: "dtype", Usage: "parameter dtype (default: float32 on CPU, the checkpoint's on CUDA)"},
	}
}

// loadModel loads --model on --device in --dtype.
func loadModel(c *cli.Context) (*model.Model, error) {
	dev, err := parseDevice(c.String("device"))
	if err != nil {
		return nil, usageError{err}
	}
	var dtype gotch.DType
	if d := c.String("dtype"); d != "" {
		if dtype, err = parseDTypeFlag(d); err != nil {
			return nil, err
		}
	}
	return model.LoadWithAdapter(c.String("model"), c.String("adapter"), model.LoadOptions{Device: dev, DType: dtype})
}

// adapterFlag puts a PEFT LoRA adapter on --model.
var adapterFlag = &cli.StringFlag{Name: "adapter", Usage: "a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors; a LoRA run's checkpoint is one) to apply to --model, unmerged"}

// benchModelFlags are the flags benchModel reads, plus the reference python.
func benchModelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "shape", Value: "0.5b", Usage: "0.5b, 7b, or a config.json (or a directory holding one)"},
		&cli.Int64Flag{Name: "layers", Usage: "fewer layers for a quick run (default: the shape's)"},
		&cli.StringFlag{Name: "hf-python", EnvVars: []string{"LANPO_HF_PYTHON"}, Value: "python3", Usage: "a python with torch and transformers; \"\" skips the reference"},
	}
}

// benchModel builds the random model of --shape (Qwen2.5-0.5B's by
// default) the benchmarks run, with --layers layers, and reports the
// libtorch it runs on.
func benchModel(c *cli.Context, attn model.AttentionImpl) (*model.Model, csrc.Info, error) {
	cfg, err := benchShape(c)
	if err != nil {
		return nil, csrc.Info{}, err
	}
	info, err := csrc.BuildInfo()
	if err != nil {
		return nil, info, err
	}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: gotch.CPU, Attention: attn}, 1)
	return m, info, err
}

// parseDevice reads --device (auto, cpu, cuda — cuda:$LOCAL_RANK under a
// torchrun-style launch — or cuda:N), checks that this build and machine
// can run on it and, for CUDA, makes it the current device of this (the
// main, locked) thread before any CUDA work (trainer.UseDevice).
func parseDevice(s string) (gotch.Device, error) {
	if _, err := trainer.ParseDevice(s); err != nil {
		return gotch.CPU, fmt.Errorf("--device %w", err)
	}
	d, err := trainer.UseDevice(s)
	if err != nil {
		return gotch.CPU, fmt.Errorf("--device: %w", err)
	}
	if s == trainer.DeviceAuto {
		name := "cpu"
		if d.IsCuda() {
			name = fmt.Sprintf("cuda:%d", d.CInt())
		}
		log.Info().Str("device", name).Msg("--device auto: running on " + name)
	}
	return d, nil
}

// checkDeviceFlag is parseDevice without making the device current: for a
// process that only starts others (lanpo bench allreduce's launcher), which
// would otherwise create a CUDA context of its own.
func checkDeviceFlag(s string) error {
	d, err := trainer.ParseDevice(s)
	if err != nil {
		return fmt.Errorf("--device %w", err)
	}
	if err := trainer.CheckDevice(d); err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	return nil
}

// benchDevice is --device and --dtype of a benchmark (benchDType).
func benchDevice(c *cli.Context) (gotch.Device, gotch.DType, error) {
	dev, err := parseDevice(c.String("device"))
	if err != nil {
		return dev, 0, err
	}
	dt, err := benchDType(c, dev)
	return dev, dt, err
}

// benchDType is --dtype, or the default for dev: bfloat16 on CUDA, float32
// on CPU.
func benchDType(c *cli.Context, dev gotch.Device) (gotch.DType, error) {
	if s := c.String("dtype"); s != "" {
		return parseDTypeFlag(s)
	}
	if dev.IsCuda() {
		return gotch.BFloat16, nil
	}
	return gotch.Float, nil
}

func parseDTypeFlag(s string) (gotch.DType, error) {
	d, err := csrc.ParseDType(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--dtype: %w", err)}
	}
	return d, nil
}
