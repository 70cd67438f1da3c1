// Command lanpo trains language models for math reasoning with GRPO and
// LANPO on libtorch. Run `lanpo --help` for the commands.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/trainer"
)

// version is set at build time by the Makefile (-ldflags -X main.version=…).
var version = "dev"

// All libtorch work happens on the main goroutine, locked to the main OS
// thread: grad mode and gotch's last-error slot are thread-local (CONTRIBUTING.md, Threads).
func init() { runtime.LockOSThread() }

// exitCoder errors carry their own exit status; anything else exits 1.
type usageError struct{ error }

func (usageError) ExitCode() int { return 2 }

func newApp() *cli.App {
	cli.HelpFlag = &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "show help"}
	return tidyCLI(&cli.App{
		Name:    "lanpo",
		Usage:   "train LLMs for math reasoning with GRPO and LANPO, on libtorch",
		Version: version,
		// A repeatable flag's value is taken whole: --set 'data.system_prompt=Think, then answer.'
		// and --stop "," mean what they say (urfave/cli splits at commas by default).
		DisableSliceFlagSeparator: true,
		Description: "lanpo loads Hugging Face Qwen2-family models and JSONL math data as they are, and trains them\n" +
			"with reinforcement learning from verified answers. Every forward and backward pass runs in\n" +
			"libtorch. Commands read JSONL on stdin and write JSONL on stdout where that makes sense.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"LANPO_LOG_LEVEL"}},
			&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "auto (console on a terminal, JSON otherwise), console or json"},
			&cli.StringFlag{Name: "cpu-profile", Usage: "write a Go CPU profile of the command to this file (go tool pprof)"},
		},
		Before: func(c *cli.Context) error {
			if err := setupLogging(c.String("log-level"), c.String("log-format")); err != nil {
				return err
			}
			if path := c.String("cpu-profile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
			}
			return nil
		},
		After: func(c *cli.Context) error {
			pprof.StopCPUProfile() // no-op without --cpu-profile
			return nil
		},
		Commands: []*cli.Command{
			envCommand(),
			versionCommand(),
			benchCommand(),
			scoreCommand(),
			generateCommand(),
			tokenizeCommand(),
			verifyCommand(),
			sftCommand(),
			trainCommand(),
			launchCommand(),
			poolCommand(),
			checkpointCommand(),
			exportCommand(),
			evalCommand(),
			seedCommand(),
			planCommand(),
			demoCommand(),
			reportCommand(),
		},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return usageError{err}
		},
		ExitErrHandler: func(c *cli.Context, err error) {},
		Suggest:        true, // a mistyped command or flag: "Did you mean …?"
	})
}

func main() {
	err := newApp().Run(os.Args)
	if err == nil {
		return
	}
	if err.Error() != "" { // an exit with a status only (130 after a signal) has said what happened
		log.Error().Msg(err.Error())
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		os.Exit(ec.ExitCode())
	}
	os.Exit(exitStatus(err))
}

// exitStatus is the status of an error that carries none: 2 for what the
// user asked for (trainer.ConfigError), 3 for a checkpoint that did not
// fit on its disk (trainer.NoSpaceError), else 1 (clihelp.go lists them).
func exitStatus(err error) int {
	var ce trainer.ConfigError
	if errors.As(err, &ce) {
		return dist.ExitConfig
	}
	var ns *trainer.NoSpaceError
	if errors.As(err, &ns) {
		return dist.ExitNoSpace
	}
	return 1
}

func setupLogging(level, format string) error {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	zerolog.SetGlobalLevel(lvl)
	console := false
	switch format {
	case "auto":
		console = isTerminal(os.Stderr)
	case "console":
		console = true
	case "json":
	default:
		return usageError{fmt.Errorf("--log-format %q: want auto, console or json", format)}
	}
	if console {
		log.Logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	} else {
		log.Logger = zerolog.New(os.Stderr).With().Timestamp().Logger()
	}
	return nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
