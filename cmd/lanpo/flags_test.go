package main

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestRepeatableFlagsKeepCommas: a repeatable flag's value is taken whole —
// urfave/cli splits at commas by default, which broke --set with a comma
// in its value, refused --stop "," and turned --stop "x, y" into two
// strings.
func TestRepeatableFlagsKeepCommas(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
		want []string
	}{
		{[]string{"train", "--config", "c.yaml", "--set", "data.system_prompt=Think step by step, then answer.", "--set", "seed=2"}, "set",
			[]string{"data.system_prompt=Think step by step, then answer.", "seed=2"}},
		{[]string{"generate", "--model", "m", "--stop", ",", "--stop", "x, y"}, "stop", []string{",", "x, y"}},
		{[]string{"eval", "--config", "c.yaml", "--set", "eval.modes=[zero-shot, retrieval]"}, "set", []string{"eval.modes=[zero-shot, retrieval]"}},
		{[]string{"bench", "relevance", "--data", "d", "--pair", "a,1 b,2"}, "pair", []string{"a,1 b,2"}},
	} {
		app := newApp()
		var got []string
		var find func(cmds []*cli.Command) bool
		find = func(cmds []*cli.Command) bool {
			for _, cmd := range cmds {
				if slices.Contains(c.args, cmd.Name) && len(cmd.Subcommands) > 0 {
					return find(cmd.Subcommands)
				}
				if slices.Contains(c.args, cmd.Name) {
					cmd.Action = func(ctx *cli.Context) error { got = ctx.StringSlice(c.flag); return nil }
					cmd.Before = nil
					return true
				}
			}
			return false
		}
		if !find(app.Commands) {
			t.Fatalf("%v: no such command", c.args)
		}
		app.Before = nil
		if err := app.Run(append([]string{"lanpo"}, c.args...)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: --%s %q, want %q", c.args, c.flag, got, c.want)
		}
	}
}
