package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/sugarme/gotch"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/trainer"
)

func envCommand() *cli.Command {
	return &cli.Command{
		Name:  "env",
		Usage: "show the libtorch lanpo runs on, its C++ ABI, CUDA devices and unavailable ops",
		Description: "Reports what this binary was built against and what libtorch sees now: the libtorch\n" +
			"directory and version (and where it came from: LIBTORCH, the cached PyPI build, or Debian),\n" +
			"the C++ ABI, whether lanpo's CUDA code is compiled in, CUDA availability and device count,\n" +
			"the gotch version, and how many of gotch's generated ops are unavailable because they did\n" +
			"not compile against this libtorch (0 for libtorch 2.1.x); then, for --device and --dtype, the\n" +
			"log-prob kernel (lanpo's fused CUDA kernels or the chunked ATen path) and the attention a run uses.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of text"},
			&cli.BoolFlag{Name: "ops", Usage: "list the unavailable ops by name"},
			&cli.StringFlag{Name: "device", Usage: "the run's device: cpu, cuda or cuda:N (default cuda:0 where available, else cpu)"},
			&cli.StringFlag{Name: "dtype", Usage: "the parameters' dtype (default float32 on CPU, bfloat16 on CUDA)"},
		},
		Action: func(c *cli.Context) error {
			info, err := csrc.BuildInfo()
			if err != nil {
				return err
			}
			dev := gotch.CPU
			if info.CUDAAvailable {
				dev = gotch.CudaBuilder(0)
			}
			if d := c.String("device"); d != "" {
				// Named explicitly: a device this build or machine lacks is
				// reported, not refused.
				if dev, err = trainer.ParseDevice(d); err != nil {
					return usageError{fmt.Errorf("--device %w", err)}
				}
			}
			dt, err := benchDType(c, dev)
			if err != nil {
				return err
			}
			run := runEnv{Device: devString(dev), DType: csrc.DTypeName(dt), LogProb: csrc.LogProbKernel(dev, dt), Attention: model.AttentionName(dev)}
			if err := trainer.CheckDevice(dev); err != nil {
				run.Problem = err.Error()
			}
			return writeEnv(c.App.Writer, info, run, c.Bool("json"), c.Bool("ops"))
		},
	}
}

type envReport struct {
	Lanpo     string `json:"lanpo_version"`
	GoVersion string `json:"go_version"`
	csrc.Info
	Unavailable int    `json:"unavailable_ops_count"`
	Run         runEnv `json:"run"`
}

// runEnv is what a run on one device and dtype uses.
type runEnv struct {
	Device    string `json:"device"`
	DType     string `json:"dtype"`
	LogProb   string `json:"logprob_kernel"`
	Attention string `json:"attention"`
	Problem   string `json:"problem,omitempty"` // why a run could not use the device
}

func devString(d gotch.Device) string {
	if d.IsCuda() {
		return fmt.Sprintf("cuda:%d", d.CInt())
	}
	return "cpu"
}

func writeEnv(w io.Writer, info csrc.Info, run runEnv, asJSON, listOps bool) error {
	r := envReport{Lanpo: version, GoVersion: runtime.Version(), Info: info, Unavailable: len(info.UnavailableOps), Run: run}
	if asJSON {
		if !listOps {
			r.UnavailableOps = nil
		}
		enc := json.NewEncoder(w)
		return enc.Encode(r)
	}
	abi := "pre-cxx11 (_GLIBCXX_USE_CXX11_ABI=0)"
	if info.CXX11ABI == 1 {
		abi = "cxx11 (_GLIBCXX_USE_CXX11_ABI=1)"
	}
	fmt.Fprintf(w, "lanpo           %s (%s)\n", r.Lanpo, r.GoVersion)
	fmt.Fprintf(w, "libtorch        %s\n", info.TorchVersion)
	fmt.Fprintf(w, "libtorch path   %s (%s)\n", info.LibtorchDir, info.LibtorchSource)
	fmt.Fprintf(w, "C++ ABI         %s\n", abi)
	fmt.Fprintf(w, "CPU threads     %d\n", info.Threads)
	fmt.Fprintf(w, "CUDA build      %v\n", info.BuiltWithCUDA)
	fmt.Fprintf(w, "CUDA available  %v (%d devices, cuDNN %v)\n", info.CUDAAvailable, info.CUDADevices, info.CuDNNAvailable)
	fmt.Fprintf(w, "gotch           %s (prepared copy)\n", info.GotchVersion)
	fmt.Fprintf(w, "unavailable ops %d\n", r.Unavailable)
	if listOps && len(info.UnavailableOps) > 0 {
		fmt.Fprintf(w, "  %s\n", strings.Join(info.UnavailableOps, "\n  "))
	}
	fmt.Fprintf(w, "run on          %s, %s\n", run.Device, run.DType)
	fmt.Fprintf(w, "  log-prob      %s\n", run.LogProb)
	fmt.Fprintf(w, "  attention     %s\n", run.Attention)
	if run.Problem != "" {
		fmt.Fprintf(w, "  cannot run:   %s\n", run.Problem)
	}
	return nil
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print lanpo's version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "lanpo %s\n", version)
			return err
		},
	}
}
