package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit statuses, the same for every command (README, "Exit status"):
// 0 done; 1 a runtime failure (a file that cannot be read, a failed step);
// 2 a usage or config error (a bad flag or key, a missing required flag, a
// refused resume); 3 out of disk space for a checkpoint (the previous one
// is intact); 130 interrupted by a signal (a checkpoint was saved, or the
// second signal's message says what is kept).

// defaultInUsage is a "(default: …)" (or "(default …)") a flag's usage
// text ends with.
var defaultInUsage = regexp.MustCompile(`\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$`)

// tidyCLI makes every command of app behave alike: a flag whose usage says
// its default shows that default alone (not also urfave's zero value); a
// required flag that is missing is a usage error on stderr naming it
// (urfave printed the command's help to stdout — into the output file of
// `lanpo generate > out.jsonl` — before the error).
func tidyCLI(app *cli.App) *cli.App {
	for _, f := range app.Flags {
		tidyFlag(f)
	}
	// A word that is no command: a usage error with the nearest command
	// (urfave answered "No help topic", exit 3).
	app.Action = func(c *cli.Context) error {
		if !c.Args().Present() {
			return cli.ShowAppHelp(c)
		}
		return usageError{fmt.Errorf("%q is not a lanpo command. %s (lanpo --help lists them)", c.Args().First(), cli.SuggestCommand(app.Commands, c.Args().First()))}
	}
	var walk func(cmds []*cli.Command, path string)
	walk = func(cmds []*cli.Command, path string) {
		for _, c := range cmds {
			name := strings.TrimSpace(path + " " + c.Name)
			c.OnUsageError = func(ctx *cli.Context, err error, _ bool) error {
				if bad, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
					return usageError{fmt.Errorf("lanpo %s: no flag --%s. Did you mean %s? (lanpo %s --help)", name, strings.TrimLeft(bad, "-"),
						cli.SuggestFlag(ctx.Command.Flags, strings.TrimLeft(bad, "-"), false), name)}
				}
				return usageError{fmt.Errorf("lanpo %s: %w (lanpo %s --help)", name, err, name)}
			}
			var required []cli.Flag
			for _, f := range c.Flags {
				tidyFlag(f)
				if unrequire(f) {
					required = append(required, f)
				}
			}
			if len(required) > 0 && c.Action != nil {
				action := c.Action
				c.Action = func(ctx *cli.Context) error {
					var missing []string
					for _, f := range required {
						if !ctx.IsSet(f.Names()[0]) {
							missing = append(missing, "--"+f.Names()[0])
						}
					}
					if len(missing) > 0 {
						verb := "are"
						if len(missing) == 1 {
							verb = "is"
						}
						return usageError{fmt.Errorf("lanpo %s: %s %s required (lanpo %s --help)", name, strings.Join(missing, ", "), verb, name)}
					}
					return action(ctx)
				}
			}
			if len(c.Subcommands) > 0 && c.Action == nil {
				subs := c.Subcommands
				c.Action = func(ctx *cli.Context) error {
					if !ctx.Args().Present() {
						return cli.ShowSubcommandHelp(ctx)
					}
					return usageError{fmt.Errorf("%q is not a command of lanpo %s. %s (lanpo %s --help lists them)", ctx.Args().First(), name, cli.SuggestCommand(subs, ctx.Args().First()), name)}
				}
			}
			walk(c.Subcommands, name)
		}
	}
	walk(app.Commands, "")
	return app
}

// tidyFlag moves a "(default: …)" at the end of a flag's usage into its
// DefaultText, which urfave then shows instead of the zero value.
func tidyFlag(f cli.Flag) {
	v, ok := flagStruct(f)
	if !ok {
		return
	}
	usage, def := v.FieldByName("Usage"), v.FieldByName("DefaultText")
	if !usage.IsValid() || !def.IsValid() || def.String() != "" {
		return
	}
	if m := defaultInUsage.FindStringSubmatchIndex(usage.String()); m != nil {
		u := usage.String()
		def.SetString(u[m[2]:m[3]])
		usage.SetString(u[:m[0]])
	}
}

// flagStruct is the struct behind a urfave flag (*cli.StringFlag, …),
// settable: the flag types share field names but no setters.
func flagStruct(f cli.Flag) (reflect.Value, bool) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	return v.Elem(), true
}

// unrequire turns off urfave's own check of a required flag (its help
// goes to stdout) and reports whether the flag was required; the usage
// text says "(required)".
func unrequire(f cli.Flag) bool {
	v, ok := flagStruct(f)
	if !ok {
		return false
	}
	req, usage := v.FieldByName("Required"), v.FieldByName("Usage")
	if !req.IsValid() || !req.Bool() {
		return false
	}
	req.SetBool(false)
	if usage.IsValid() {
		usage.SetString(strings.TrimSpace(usage.String() + " (required)"))
	}
	return true
}
