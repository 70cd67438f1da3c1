package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
)

func benchAllreduceCommand() *cli.Command {
	return &cli.Command{
		Name:  "allreduce",
		Usage: "allreduce latency and bus bandwidth between local ranks, against a memcpy of the same size",
		Description: "Starts itself as --nproc ranks on this machine (through lanpo launch's launcher; under\n" +
			"torchrun or lanpo launch it runs as one of the ranks instead) and times, for fp32 messages from\n" +
			"--min-bytes to --max-bytes (×4 apart): AllReduceSum (Gloo on CPU, NCCL with --device cuda), and a\n" +
			"tensor copy_ of the same size on each rank as the baseline; then Barrier. Each time is the median\n" +
			"over iterations of the slowest rank. Bus bandwidth = size / time × 2(n−1)/n (nccl-tests' formula:\n" +
			"what each rank's link carries in a ring allreduce); memcpy GB/s = size / time; ratio = busbw / memcpy.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc", Value: 2, Usage: "ranks to start on this machine"},
			&cli.Int64Flag{Name: "min-bytes", Value: 4, Usage: "smallest message"},
			&cli.Int64Flag{Name: "max-bytes", Value: 64 << 20, Usage: "largest message"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu (Gloo) or cuda (NCCL; rank r on GPU LOCAL_RANK)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "report", Hidden: true, Usage: "rank 0 writes its JSON here (set by the launching process)"},
		},
		Action: runBenchAllreduce,
	}
}

func runBenchAllreduce(c *cli.Context) error {
	if c.Int64("min-bytes") < 4 || c.Int64("max-bytes") < c.Int64("min-bytes") {
		return usageError{fmt.Errorf("--min-bytes %d, --max-bytes %d: want 4 <= min <= max", c.Int64("min-bytes"), c.Int64("max-bytes"))}
	}
	if err := checkDeviceFlag(c.String("device")); err != nil {
		return usageError{err}
	}
	if _, launched, err := dist.FromEnv(); err != nil {
		return err
	} else if launched {
		return benchAllreduceRank(c)
	}
	if gloo, _, why := dist.Available(); !gloo {
		return fmt.Errorf("bench allreduce: no distributed support in this build (%s)", why)
	}
	// Launch this binary as the ranks; rank 0 leaves the result in a file.
	dir, err := os.MkdirTemp("", "lanpo-bench-allreduce-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "report.json")
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	err = dist.Launch(context.Background(), dist.LaunchOptions{
		NProcPerNode: c.Int("nproc"), Exe: exe, Stdout: c.App.ErrWriter, Stderr: c.App.ErrWriter, Grace: 5 * time.Second,
		Args: []string{"bench", "allreduce", "--min-bytes", strconv.FormatInt(c.Int64("min-bytes"), 10),
			"--max-bytes", strconv.FormatInt(c.Int64("max-bytes"), 10), "--device", c.String("device"), "--report", report},
	})
	if err != nil {
		return fmt.Errorf("bench allreduce: %w", err)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return fmt.Errorf("bench allreduce: rank 0 wrote no report: %w", err)
	}
	var r dist.AllReduceBench
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	return printAllreduceBench(c, r)
}

// benchAllreduceRank is one rank of the benchmark.
func benchAllreduceRank(c *cli.Context) error {
	env, _, _ := dist.FromEnv()
	dev, err := parseDevice(c.String("device"))
	if err != nil {
		return err
	}
	if dev.IsCuda() {
		dev = gotch.Device{Name: "CUDA", Value: env.LocalRank} // one GPU per local rank
	}
	comm, err := dist.Init(env, dist.Options{Device: dev, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer comm.Close()
	var sizes []int64
	for b := c.Int64("min-bytes") / 4 * 4; b <= c.Int64("max-bytes"); b *= 4 {
		sizes = append(sizes, b)
	}
	r, err := dist.BenchAllReduce(comm, sizes, dev)
	if err != nil {
		return err
	}
	if comm.Rank() != 0 {
		return nil
	}
	if path := c.String("report"); path != "" {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return os.WriteFile(path, b, 0o644)
	}
	return printAllreduceBench(c, r)
}

func printAllreduceBench(c *cli.Context, r dist.AllReduceBench) error {
	w := c.App.Writer
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(r)
	}
	if len(r.Sizes) == 0 {
		return errors.New("bench allreduce: no sizes measured")
	}
	fmt.Fprintf(w, "allreduce (sum, fp32) across %d local ranks on %s; medians of the slowest rank\n", r.World, r.Device)
	fmt.Fprintf(w, "busbw = size/time × 2(n-1)/n; memcpy = tensor copy_ of the same size, size/time\n")
	fmt.Fprintf(w, "%10s %6s %12s %10s %10s %12s %10s %8s\n", "size", "iters", "latency µs", "algbw GB/s", "busbw GB/s", "memcpy µs", "memcpy GB/s", "ratio")
	for _, s := range r.Sizes {
		fmt.Fprintf(w, "%10s %6d %12.1f %10.3f %10.3f %12.1f %10.3f %8.4f\n",
			humanBytes(s.Bytes), s.Iters, s.LatencyUS, s.AlgBW, s.BusBW, s.CopyUS, s.CopyBW, s.Ratio)
	}
	fmt.Fprintf(w, "barrier: %.1f µs (median of %d)\n", r.BarrierUS, r.Barriers)
	return nil
}

func humanBytes(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}
