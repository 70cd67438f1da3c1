package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
)

func launchCommand() *cli.Command {
	return &cli.Command{
		Name:      "launch",
		Usage:     "run a lanpo command as several processes (ranks) of one data-parallel job, like torchrun",
		ArgsUsage: "-- COMMAND [ARGS...]",
		Description: "Starts --nproc-per-node copies of this lanpo binary on this machine, each running\n" +
			"`lanpo COMMAND ARGS...` as one rank of the job, and supervises them:\n" +
			"  - each gets the environment torchrun gives its workers: RANK (0 to WORLD_SIZE-1, unique in the\n" +
			"    job: node-rank × nproc-per-node + LOCAL_RANK), LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,\n" +
			"    GROUP_RANK, MASTER_ADDR, MASTER_PORT, and OMP_NUM_THREADS = CPUs / nproc-per-node unless set;\n" +
			"    rank 0 serves the rendezvous on MASTER_ADDR:MASTER_PORT and the others connect to it;\n" +
			"  - every output line is prefixed with \"[rank R] \";\n" +
			"  - Ctrl-C (SIGINT) and SIGTERM are passed on to every rank (a training run saves and stops);\n" +
			"  - when a rank fails (exits non-zero or is killed), the others get SIGTERM, then SIGKILL after\n" +
			"    --grace, and launch exits non-zero naming that rank and how it ended; run it again with\n" +
			"    --resume auto to continue from the last checkpoint. With --max-restarts N it does that itself:\n" +
			"    every rank starts again (TORCHELASTIC_RESTART_COUNT counts the restarts, and a restarted\n" +
			"    training resumes from the run's newest complete checkpoint, as --resume auto), at most N times\n" +
			"    (each restart logged with the rank that failed and how; when they run out, launch exits naming\n" +
			"    every start's failure). No restart after a rank exits 2 (a refused config: it would fail again),\n" +
			"    or after Ctrl-C/SIGTERM. One machine only: launchers on several machines do not coordinate.\n" +
			"  - a hung job is stopped: every rank of lanpo sft/train reports its progress (each phase, every\n" +
			"    few decode steps of a generation, each micro-batch) to the launcher; when no rank has reported\n" +
			"    for --hang-timeout, the rank that reported least recently — the one the others wait for, e.g.\n" +
			"    stopped, or stuck on a filesystem — is named with its last step and phase, and every rank is\n" +
			"    stopped (then restarted under --max-restarts). A rank busy in a long phase while the others\n" +
			"    wait keeps reporting, so it is not a hang. When a rank fails, every rank's last progress is\n" +
			"    printed too.\n" +
			"Flags for launch come first; everything after \"--\" is the command each rank runs.\n" +
			"\n" +
			"One machine, 4 ranks (CPU: Gloo; on CUDA each rank uses the GPU LOCAL_RANK):\n" +
			"  lanpo launch --nproc-per-node 4 -- train --config run.yaml\n" +
			"Two machines, 8 ranks each: on node 0, whose address the other node can reach is 10.0.0.1,\n" +
			"  lanpo launch --nproc-per-node 8 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\\n" +
			"    -- train --config run.yaml\n" +
			"and the same on node 1 with --node-rank 1. Across machines Gloo listens on the interface that\n" +
			"routes to --master-addr; set GLOO_SOCKET_IFNAME=eth0 (say) to choose another.\n" +
			"\n" +
			"torchrun does the same job: `torchrun --nproc-per-node 4 --no-python lanpo train --config run.yaml`\n" +
			"works too (lanpo reads its environment, including the rendezvous store its agent serves; a worker\n" +
			"it restarts resumes as above), and restarts across machines.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc-per-node", Value: 1, Usage: "ranks on this machine (one per GPU on CUDA)"},
			&cli.IntFlag{Name: "nnodes", Value: 1, Usage: "machines in the job"},
			&cli.IntFlag{Name: "node-rank", Usage: "this machine's index, 0 to nnodes-1"},
			&cli.StringFlag{Name: "master-addr", Usage: "address of node 0, where rank 0 serves the rendezvous (default 127.0.0.1 on one machine)"},
			&cli.IntFlag{Name: "master-port", Usage: "its port; required with --nnodes > 1 (default: a free one, on one machine)"},
			&cli.BoolFlag{Name: "oversubscribe", Usage: "allow more ranks than this machine has CPU cores"},
			&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "after a rank fails, how long the others get to stop before SIGKILL"},
			&cli.IntFlag{Name: "max-restarts", Usage: "after a rank fails, start every rank again (resuming from the newest checkpoint) at most this many times; one machine only"},
			&cli.DurationFlag{Name: "hang-timeout", Value: 10 * time.Minute, Usage: "stop the job when no rank has reported progress for this long (0: never); longer than a checkpoint file's write or an evaluation, which report nothing while they run"},
		},
		Action: runLaunch,
	}
}

func runLaunch(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return usageError{errors.New("launch: no command: lanpo launch [flags] -- COMMAND [ARGS...], e.g. -- train --config run.yaml")}
	}
	if n, cores := c.Int("nproc-per-node"), runtime.NumCPU(); n > cores && !c.Bool("oversubscribe") {
		return usageError{fmt.Errorf("launch: --nproc-per-node %d is more ranks than this machine's %d CPU cores (each rank is a whole trainer: one per GPU on CUDA); pass --oversubscribe to start them anyway", n, cores)}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: finding this program: %w", err)
	}
	err = dist.Launch(context.Background(), dist.LaunchOptions{
		NProcPerNode: c.Int("nproc-per-node"), NNodes: c.Int("nnodes"), NodeRank: c.Int("node-rank"),
		MasterAddr: c.String("master-addr"), MasterPort: c.Int("master-port"),
		Exe: exe, Args: args, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Grace: c.Duration("grace"),
		MaxRestarts: c.Int("max-restarts"), HangTimeout: c.Duration("hang-timeout"),
	})
	var ee *dist.ExitError
	var he *dist.HangError
	switch {
	case errors.As(err, &he) && !errors.As(err, &ee):
		return cli.Exit("launch: "+err.Error(), 1)
	case errors.As(err, &ee) && ee.Signal != 0:
		return cli.Exit("launch: "+err.Error(), 128+int(ee.Signal)) // the shell's convention
	case errors.As(err, &ee):
		return cli.Exit("launch: "+err.Error(), ee.Status)
	}
	return err
}
