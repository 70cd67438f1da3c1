package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/trainer"
)

func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:  "checkpoint",
		Usage: "check training checkpoints",
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "check checkpoints against their manifests: every file there, of its size and SHA-256",
			ArgsUsage: "DIR...",
			Description: "DIR is a checkpoint (RUN_DIR/checkpoints/step-NNNNNN) or a run directory (each of its complete\n" +
				"checkpoints). Prints one line per checkpoint: ok, with its files and bytes; sizes only, for a\n" +
				"checkpoint saved before lanpo wrote digests; or FAILED, naming each file that differs. Exits 1 when\n" +
				"any checkpoint fails. Nothing is moved: a resume with --resume auto sets a failing checkpoint aside\n" +
				"and takes the previous one; --resume PATH refuses it.",
			Action: runCheckpointVerify,
		}},
	}
}

func runCheckpointVerify(c *cli.Context) error {
	if c.NArg() == 0 {
		return usageError{errors.New("checkpoint verify: name a checkpoint or run directory")}
	}
	var dirs []string
	for _, arg := range c.Args().Slice() {
		if _, err := os.Stat(filepath.Join(arg, "manifest.json")); err == nil {
			dirs = append(dirs, arg)
			continue
		}
		all := trainer.CompleteCheckpoints(arg)
		if len(all) == 0 {
			return usageError{fmt.Errorf("%s: neither a checkpoint (no manifest.json) nor a run directory with complete checkpoints", arg)}
		}
		dirs = append(dirs, all...)
	}
	failed := 0
	w := c.App.Writer
	for _, dir := range dirs {
		v, err := trainer.VerifyCheckpoint(dir)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(w, "%s: FAILED: %v\n", dir, err)
		case !v.Digests:
			fmt.Fprintf(w, "%s: sizes only (saved before checkpoints had digests): %d files, %d bytes\n", dir, v.Files, v.Bytes)
		default:
			fmt.Fprintf(w, "%s: ok: %d files, %d bytes, SHA-256 checked in %.1f s\n", dir, v.Files, v.Bytes, v.Seconds)
		}
	}
	if failed > 0 {
		return cli.Exit(fmt.Sprintf("checkpoint verify: %d of %d checkpoint(s) failed", failed, len(dirs)), 1)
	}
	return nil
}
