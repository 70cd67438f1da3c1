package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
)

func envCommand() *cli.Command {
	return &cli.Command{
		Name:  "env",
		Usage: "show the libtorch lanpo runs on, its C++ ABI, CUDA devices and unavailable ops",
		Description: "Reports what this binary was built against and what libtorch sees now: the libtorch\n" +
			"directory and version (and where it came from: LIBTORCH, the cached PyPI build, or Debian),\n" +
			"the C++ ABI, whether lanpo's CUDA code is compiled in, CUDA availability and device count,\n" +
			"the gotch version, and how many of gotch's generated ops are unavailable because they did\n" +
			"not compile against this libtorch (0 for libtorch 2.1.x).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of text"},
			&cli.BoolFlag{Name: "ops", Usage: "list the unavailable ops by name"},
		},
		Action: func(c *cli.Context) error {
			info, err := csrc.BuildInfo()
			if err != nil {
				return err
			}
			return writeEnv(c.App.Writer, info, c.Bool("json"), c.Bool("ops"))
		},
	}
}

type envReport struct {
	Lanpo     string `json:"lanpo_version"`
	GoVersion string `json:"go_version"`
	csrc.Info
	Unavailable int `json:"unavailable_ops_count"`
}

func writeEnv(w io.Writer, info csrc.Info, asJSON, listOps bool) error {
	r := envReport{Lanpo: version, GoVersion: runtime.Version(), Info: info, Unavailable: len(info.UnavailableOps)}
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
