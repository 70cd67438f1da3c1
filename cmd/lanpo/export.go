package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/trainer"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a LoRA checkpoint for transformers, PEFT or vLLM: merged into a full model, or the adapter alone",
		ArgsUsage: "CKPT OUT",
		Description: "CKPT is a LoRA run's checkpoint (RUN_DIR/checkpoints/step-NNNNNN) or any PEFT adapter directory; its\n" +
			"base model is the one adapter_config.json names (base_model_name_or_path), or --base. With --merge, OUT\n" +
			"becomes a full Hugging Face model (config.json, model.safetensors, generation_config.json, the\n" +
			"checkpoint's tokenizer and chat template) with W + s·B·A in every adapted projection, computed in fp32\n" +
			"and rounded once to the base's dtype (--dtype to change it): AutoModelForCausalLM.from_pretrained\n" +
			"loads it. Without --merge, OUT is the adapter alone (adapter_config.json, adapter_model.safetensors,\n" +
			"tokenizer files) without the trainer's state: PeftModel.from_pretrained and vLLM's --lora-modules\n" +
			"read it (vLLM's --max-lora-rank defaults to 16: pass a larger one for r > 16). OUT must be new or\n" +
			"empty.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "merge", Usage: "write a full model with the adapters merged"},
			&cli.StringFlag{Name: "base", Usage: "the base model directory (default: adapter_config.json's base_model_name_or_path)"},
			&cli.StringFlag{Name: "dtype", Usage: "--merge: the merged weights' dtype (default: the base's torch_dtype)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{fmt.Errorf("export: want CKPT OUT, got %d arguments", c.NArg())}
			}
			if c.String("dtype") != "" && !c.Bool("merge") {
				return usageError{fmt.Errorf("--dtype is for --merge (an adapter stays fp32)")}
			}
			what, err := trainer.Export(trainer.ExportOptions{Adapter: c.Args().Get(0), Out: c.Args().Get(1), Base: c.String("base"),
				Merge: c.Bool("merge"), DType: c.String("dtype")})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s: %s\n", c.Args().Get(1), what)
			return nil
		},
	}
}
