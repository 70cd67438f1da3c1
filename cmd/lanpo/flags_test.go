package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/trainer"
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

// TestFiltersKeepOutputBeforeABadLine: verify, tokenize, score and
// generate write the output of every line before a bad one, then stop
// naming it (exit 1); --skip-bad-lines writes an error record in its place
// and goes on. Before, 3 good lines and a bad one gave no output at all.
func TestFiltersKeepOutputBeforeABadLine(t *testing.T) {
	tiny := filepath.Join("..", "..", "model", "testdata", "tiny")
	for _, c := range []struct {
		name    string
		args    []string
		good    string // one good input line
		perLine int    // output lines per good input line
	}{
		{"verify", []string{"verify"}, `{"pred": "\\boxed{2}", "gold": "2"}`, 1},
		{"tokenize", []string{"tokenize", "--tokenizer", qwen3Tokenizer(t)}, `{"text": "x^2"}`, 1},
		{"score", []string{"score", "--model", filepath.Join(tiny, "qwen2-gqa2-tied")}, `{"ids": [1, 2, 3]}`, 1},
		{"generate", []string{"generate", "--model", filepath.Join(tiny, "qwen3-gqa3"), "--max-new-tokens", "2", "--samples", "2", "--batch-size", "8"}, `{"prompt_ids": [4, 5]}`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Repeat(c.good+"\n", 3) + "{\"oops\": 1}\n" + c.good + "\n"
			run := func(extra ...string) ([]string, error) {
				app := newApp()
				var out bytes.Buffer
				app.Reader, app.Writer = strings.NewReader(in), &out
				err := app.Run(append(append([]string{"lanpo"}, c.args...), extra...))
				return strings.Split(strings.TrimSpace(out.String()), "\n"), err
			}
			lines, err := run()
			if err == nil || !strings.Contains(err.Error(), "stdin line 4") {
				t.Fatalf("error %v, want one naming stdin line 4", err)
			}
			if len(lines) != 3*c.perLine || strings.Contains(lines[0], "error") || lines[0] == "" {
				t.Fatalf("%d output lines before the bad one, want %d: %q", len(lines), 3*c.perLine, lines)
			}
			lines, err = run("--skip-bad-lines")
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) != 4*c.perLine+1 || !strings.HasPrefix(lines[3*c.perLine], `{"error":"stdin line 4: `) {
				t.Fatalf("--skip-bad-lines: %q", lines)
			}
		})
	}
}

// TestEvalLimitMustBePositive: --limit -3 (and 0) used to evaluate
// everything in silence.
func TestEvalLimitMustBePositive(t *testing.T) {
	tiny := filepath.Join("..", "..", "model", "testdata", "tiny", "qwen3-gqa3")
	for _, n := range []string{"-3", "0"} {
		_, err := runApp(t, "eval", "--model", tiny, "--bench", "gsm8k", "--limit", n, "--out", t.TempDir())
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--limit "+n) {
			t.Errorf("--limit %s: %v", n, err)
		}
	}
}

// TestCLIManners: -h is help everywhere; a mistyped command or flag is a
// usage error (exit 2) that suggests the nearest; a missing required flag
// is a usage error that writes nothing to stdout (urfave printed the help
// there, into `> out.jsonl`); every flag's help shows one default; a
// refused resume exits 2 like any config error.
func TestCLIManners(t *testing.T) {
	run := func(args ...string) (stdout string, err error) {
		app := newApp()
		var out, errOut bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errOut
		err = app.Run(append([]string{"lanpo"}, args...))
		return out.String(), err
	}
	if out, err := run("bench", "logprob", "-h"); err != nil || !strings.Contains(out, "--hidden value") {
		t.Fatalf("bench logprob -h: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"scroe"}, `Did you mean "score"?`},
		{[]string{"pool", "stat", "runs/x"}, `Did you mean "stats"?`},
		{[]string{"score", "--modle", "x"}, "no flag --modle. Did you mean --model?"},
		{[]string{"score"}, "lanpo score: --model is required"},
		{[]string{"bench", "relevance"}, "lanpo bench relevance: --data is required"},
	} {
		out, err := run(c.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) || out != "" {
			t.Errorf("%v: error %v (want a usage error saying %q), stdout %q", c.args, err, c.want, out)
		}
	}
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			args := append(append([]string(nil), prefix...), c.Name)
			out, err := run(append(args, "--help")...)
			if err != nil {
				t.Errorf("%v --help: %v", args, err)
			}
			for _, line := range strings.Split(out, "\n") {
				// "(default 0.75) (default: 0)" as much as "(default: x) (default: y)".
				if strings.Count(line, "(default") > 1 {
					t.Errorf("%v --help shows two defaults: %s", args, strings.TrimSpace(line))
				}
			}
			walk(args, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if s := exitStatus(fmt.Errorf("wrapped: %w", trainer.ConfigError{Err: errors.New("refused")})); s != 2 {
		t.Errorf("a refused resume exits %d", s)
	}
	if s := exitStatus(fmt.Errorf("checkpoint at step 2: %w", &trainer.NoSpaceError{WrittenErr: errors.New("no space left on device")})); s != 3 {
		t.Errorf("a full disk exits %d, want 3 (lanpo launch does not restart it)", s)
	}
}

// flagGetters are urfave's lookups by flag name; for an undefined name
// they return the zero value in silence (bench logprob read --h after the
// flag became --hidden, and failed every run with "--h must be > 0").
var flagGetters = map[string]bool{"String": true, "Int": true, "Int64": true, "Uint64": true, "Uint": true, "Float64": true, "Bool": true,
	"StringSlice": true, "IntSlice": true, "Int64Slice": true, "Float64Slice": true, "Duration": true, "IsSet": true, "Path": true}

// flagLookups lists the flag names the non-test Go files of dir look up
// through a *cli.Context (named c or ctx),
// "file:line name": a string literal passed to a getter, or each string of
// a []string{…} literal a loop passes to one.
func flagLookups(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	getterArg := func(n ast.Node) (ast.Expr, bool) {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return nil, false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !flagGetters[sel.Sel.Name] {
			return nil, false
		}
		// The CLI's code names its *cli.Context c or ctx.
		if recv, ok := sel.X.(*ast.Ident); !ok || (recv.Name != "c" && recv.Name != "ctx") {
			return nil, false
		}
		return call.Args[0], true
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if arg, ok := getterArg(n); ok {
				if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, _ := strconv.Unquote(lit.Value)
					out = append(out, fmt.Sprintf("%s %s", fset.Position(lit.Pos()), name))
				}
			}
			rng, ok := n.(*ast.RangeStmt)
			if !ok {
				return true
			}
			list, ok1 := rng.X.(*ast.CompositeLit)
			v, ok2 := rng.Value.(*ast.Ident)
			if !ok1 || !ok2 {
				return true
			}
			used := false
			ast.Inspect(rng.Body, func(n ast.Node) bool {
				if arg, ok := getterArg(n); ok {
					if id, ok := arg.(*ast.Ident); ok && id.Name == v.Name {
						used = true
					}
				}
				return true
			})
			if used {
				for _, e := range list.Elts {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						name, _ := strconv.Unquote(lit.Value)
						out = append(out, fmt.Sprintf("%s %s", fset.Position(lit.Pos()), name))
					}
				}
			}
			return true
		})
	}
	return out
}

// TestFlagLookupsNameFlags: every flag name the CLI's code looks up is the
// name (or alias) of a flag some command defines — help's -h aside, so a
// lookup of "h" fails here as it failed for users.
func TestFlagLookupsNameFlags(t *testing.T) {
	defined := map[string]bool{}
	app := newApp()
	add := func(flags []cli.Flag) {
		for _, f := range flags {
			for _, n := range f.Names() {
				defined[n] = true
			}
		}
	}
	add(app.Flags)
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			add(c.Flags)
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
	for _, n := range cli.HelpFlag.Names() {
		delete(defined, n)
	}
	lookups := flagLookups(t, ".")
	if len(lookups) < 50 {
		t.Fatalf("found %d flag lookups in cmd/lanpo; the scan is broken", len(lookups))
	}
	for _, l := range lookups {
		name := l[strings.LastIndex(l, " ")+1:]
		if !defined[name] {
			t.Errorf("%s: no command defines a flag --%s", l[:strings.LastIndex(l, " ")], name)
		}
	}
}
