package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/model"
)

// The shell examples of README.md and docs/*.md are run by TestDocExamples
// in a workspace of tiny stand-ins, as they are written but for the
// substitutions below — the one table of what differs from a user's
// machine. An example that cannot run here is marked in its document, on
// the line(s) just above its code block:
//
//	<!-- not run: REASON -->            every example of the block
//	<!-- not run "TEXT": REASON -->     the block's examples containing TEXT
//
// Every example, run or not, is also parsed against the command tree:
// its commands and flags must exist (TestDocExamples), as must those of
// the examples in each command's --help (TestHelpExamples).

// docSubstitution replaces from (a regular expression) with to in an
// example before it runs.
type docSubstitution struct {
	from *regexp.Regexp
	to   string
	why  string
}

func literal(s string) *regexp.Regexp { return regexp.MustCompile(regexp.QuoteMeta(s)) }

// docSubstitutions is the table, applied in order (substituteDoc): a
// later entry sees what earlier ones wrote (bench logprob's two). "{repo}"
// in a replacement is the checkout's absolute path, put in only after the
// whole table has run, so no entry rewrites a part of that path: the
// checkout may live anywhere, /tmp/ included. The workspace
// (exampleWorkspace) holds, under the names the documents use: qwen (a
// random 1-layer Qwen3 with Qwen3's real tokenizer), tiny (the built-in
// tiny model after 60 SFT steps: it answers one-digit arithmetic),
// models/Qwen2.5-1.5B-Instruct (tiny: the recipe's model must answer for
// lanpo seed to keep examples), data/ (the benchmark files' names and
// math_train.jsonl: the tiny arithmetic problems under every benchmark's
// name, math_train four of them and twelve of MATH; also $LANPO_DATA), shared-data/ (two real problems of each benchmark and
// twelve of MATH train: testdata/shared-data), problems.jsonl,
// prompts.jsonl, run.yaml, my.yaml and my-run.yaml (tiny configs), configs
// (the repository's), runs/x (a two-step LANPO run of run.yaml), and bin/lanpo
// and lanpo on PATH (this test binary as the command). Each document runs
// in its own copy of it, after its docSetup.
var docSubstitutions = []docSubstitution{
	{literal("~/models/Qwen3-8B"), "qwen", "a model directory: the Qwen3 stand-in"},
	{literal("~/models/Qwen2.5-0.5B-Instruct"), "qwen", "a model directory: the Qwen3 stand-in"},
	{literal("~/.cache/lanpo/models/qwen2.5-coder-0.5b-instruct-hf"), "qwen", "a model directory: the Qwen3 stand-in"},
	{literal("~/.cache/lanpo/tokenizers/qwen3"), "qwen", "Qwen3's tokenizer: the stand-in's"},
	{regexp.MustCompile(`\bDIR\b`), "qwen", "a model directory: the Qwen3 stand-in"},
	{literal("../shared/data"), "shared-data", "the benchmark files: two problems each"},
	{literal("reward/testdata/"), "{repo}/reward/testdata/", "the repository's file"},
	{literal("/tmp/"), "tmp/", "scratch space inside the workspace"},
	{literal("step-000100"), "step-000002", "runs/x's checkpoints"},
	{literal("step-000500"), "step-000002", "the recipe's run, 2 steps here"},
	{literal("make fixtures && "), "", "make's targets are not the example (make test fetches the fixtures first)"},
	{literal("make build && "), "", "make's targets are not the example (this test binary is lanpo)"},
	{literal("bench logprob --n 2048 --hidden 896 --v 151936"), "bench logprob", "the 0.5B shape's sizes are the defaults (next line)"},
	{literal("bench logprob"), "bench logprob --n 64 --hidden 32 --v 512", "2048 × 896 × 151936 takes 30 s on 2 cores"},
	{literal("bench forward"), "bench forward --shape tiny", "the tiny model's shape: Qwen2.5-0.5B's takes minutes"},
	{literal("bench generate"), "bench generate --shape tiny", "the tiny model's shape: Qwen2.5-0.5B's takes minutes"},
	{literal("bench memory"), "bench memory --model tiny", "the tiny model's shape: the default one takes a minute"},
	{literal("--nproc-per-node 4"), "--nproc-per-node 2", "ranks: lanpo launch refuses more than the machine's 2 cores"},
	{literal("--k 32"), "--k 2", "2 samples a problem"},
	{literal("--max-new-tokens 8192"), "--max-new-tokens 32", "the stand-ins write until the limit"},
	{regexp.MustCompile(`\blanpo eval `), "lanpo eval --max-new-tokens 32 ", "the stand-ins write until the limit"},
	{regexp.MustCompile(`\blanpo seed `), "lanpo seed --max-new-tokens 32 ", "the stand-ins write until the limit"},
	{literal("--config configs/recipe/sft-seed.yaml"), "--config configs/recipe/sft-seed.yaml --set total_steps=2 --set sft.max_len=0 --set sft.grad_accum=1",
		"2 steps; the tiny model's context (1024) is shorter than the recipe's sft.max_len"},
	{literal("train --config configs/recipe/lanpo.yaml"), "train --config configs/recipe/lanpo.yaml --set total_steps=2 --set model=runs/recipe-sft/checkpoints/step-000002 " +
		"--set rollout.max_new_tokens=32 --set rollout.prompts_per_step=4 --set lanpo.max_context_tokens=256", "2 steps from the 2-step SFT; the tiny model's context"},
}

// repoMark stands for "{repo}" while the table runs: a NUL, which no
// document holds and no entry matches.
const repoMark = "\x00repo\x00"

// substituteDoc applies subs to an example in order, then puts in repo for
// "{repo}" (docSubstitutions).
func substituteDoc(text string, subs []docSubstitution, repo string) string {
	for _, s := range subs {
		text = s.from.ReplaceAllLiteralString(text, strings.ReplaceAll(s.to, "{repo}", repoMark))
	}
	return strings.ReplaceAll(text, repoMark, repo)
}

// docSetup are commands run in a document's workspace before its
// examples: what the document assumes was done (README.md's steps).
var docSetup = map[string][]string{
	"lanpo.md": {"bin/lanpo --log-level warn train --config configs/tiny-lanpo.yaml"}, // README: "bin/lanpo train --config configs/tiny-lanpo.yaml"
}

// docChecks are what an example must have done beyond exiting 0: each
// runs, in its document's workspace, after the examples whose text
// contains its text.
var docChecks = []struct {
	text  string
	check func(ws string) error
}{
	// README's LoRA example once started from random weights: every reward
	// was 0, so every gradient, and the adapter it saved was its
	// initialization (lora_B = 0; its merged export the base model).
	{"--set run_dir=runs/tiny-lora", func(ws string) error {
		return adapterMoved(filepath.Join(ws, "runs", "tiny-lora", "checkpoints", "step-000006", "adapter_model.safetensors"))
	}},
}

// adapterMoved checks that every lora_B of a PEFT adapter file left its
// initialization, 0.
func adapterMoved(path string) error {
	f, err := model.OpenSafetensors(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n := 0
	for _, ti := range f.Tensors() {
		if !strings.Contains(ti.Name, "lora_B") {
			continue
		}
		if ti.DType != "F32" {
			return fmt.Errorf("%s: %s is %s, want F32", path, ti.Name, ti.DType)
		}
		b, _, err := f.Bytes(ti.Name)
		if err != nil {
			return err
		}
		maxAbs := 0.0
		for i := 0; i+4 <= len(b); i += 4 {
			maxAbs = max(maxAbs, math.Abs(float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))))
		}
		if maxAbs == 0 {
			return fmt.Errorf("%s: %s is all zeros: the adapter did not train", path, ti.Name)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: no lora_B tensor", path)
	}
	return nil
}

// docExample is one command line a document shows (continuation lines
// joined), with the variable assignments above it in its block.
type docExample struct {
	where  string // file:line
	text   string
	setup  []string
	notRun string // why it is not run; "" runs it
}

var (
	notRunMark = regexp.MustCompile(`^<!-- not run(?: "([^"]+)")?: (.+?) -->$`)
	invokes    = regexp.MustCompile(`(^|[\s;&|(/])lanpo(:cuda)?(\s|$)`)
	assignment = regexp.MustCompile(`^(export\s+)?[A-Za-z_][A-Za-z0-9_]*=\S*(\s+#.*)?$`)
)

// shellBlock reports whether a fenced block's language is a shell's.
func shellBlock(lang string) bool {
	return slices.Contains([]string{"", "sh", "bash", "shell", "console"}, lang)
}

// docExamples reads the examples of a Markdown file.
func docExamples(t *testing.T, path string) []docExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []docExample
	for i := 0; i < len(lines); i++ {
		fence, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		lang := strings.TrimSpace(fence)
		type mark struct{ text, why string }
		var marks []mark
		for j := i - 1; j >= 0; j-- {
			m := notRunMark.FindStringSubmatch(lines[j])
			if m == nil {
				break
			}
			marks = append(marks, mark{m[1], m[2]})
		}
		end := i + 1
		for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
			end++
		}
		if !shellBlock(lang) {
			if len(marks) > 0 {
				t.Errorf("%s:%d: a not-run mark above a %q block", path, i+1, lang)
			}
			i = end
			continue
		}
		var setup []string
		used := make([]bool, len(marks))
		for k := i + 1; k < end; k++ {
			start, text := k, lines[k]
			if lang == "console" {
				var ok bool
				if text, ok = strings.CutPrefix(text, "$ "); !ok {
					continue
				}
			}
			for strings.HasSuffix(text, "\\") && k+1 < end {
				k++
				text = strings.TrimSuffix(text, "\\") + " " + strings.TrimSpace(lines[k])
			}
			trimmed := strings.TrimSpace(text)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			if !invokes.MatchString(trimmed) {
				if assignment.MatchString(trimmed) {
					setup = append(setup, trimmed)
				}
				continue
			}
			ex := docExample{where: fmt.Sprintf("%s:%d", path, start+1), text: trimmed, setup: slices.Clone(setup)}
			for n, m := range marks {
				if m.text == "" || strings.Contains(trimmed, m.text) {
					ex.notRun, used[n] = m.why, true
				}
			}
			out = append(out, ex)
		}
		for n, m := range marks {
			if !used[n] {
				t.Errorf("%s:%d: the mark %q matches no example of the block below it", path, i+1, m.text)
			}
		}
		i = end
	}
	return out
}

// shellWord is a word of a command line, or an operator between
// commands (|, ||, &&, ;, &, <, >, (, )).
type shellWord struct {
	text string
	op   bool
}

// shellWords splits a command line as a shell would into words and
// operators, quotes removed, up to a comment.
func shellWords(s string) []shellWord {
	var words []shellWord
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, shellWord{text: cur.String()})
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				end = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case ch == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			inWord = true
		case ch == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case ch == ' ' || ch == '\t':
			flush()
		case ch == '#' && !inWord:
			flush()
			return words
		case strings.IndexByte("|&;<>()", ch) >= 0:
			flush()
			op := string(ch)
			if i+1 < len(s) && (s[i:i+2] == "||" || s[i:i+2] == "&&") {
				op, i = s[i:i+2], i+1
			}
			words = append(words, shellWord{text: op, op: true})
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	flush()
	return words
}

// lanpoCalls lists the lanpo invocations of a command line: the words
// after each lanpo (bin/lanpo, lanpo:cuda as a Docker image runs it unless
// --entrypoint names another program) up to the next operator.
var shellAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func lanpoCalls(line string) [][]string {
	words := shellWords(line)
	var calls [][]string
	for i, w := range words {
		image := w.text == "lanpo:cuda" && !slices.Contains(words[:i], shellWord{text: "--entrypoint"})
		if w.op || (w.text != "lanpo" && !image && !strings.HasSuffix(w.text, "/lanpo")) {
			continue
		}
		// A script's path to a binary it copies, strips or diagnoses, or a
		// variable set to one: not an invocation.
		if strings.HasPrefix(w.text, "$") || shellAssignment.MatchString(w.text) {
			continue
		}
		var args []string
		for _, a := range words[i+1:] {
			if a.op {
				break
			}
			args = append(args, a.text)
		}
		calls = append(calls, args)
	}
	return calls
}

// checkCall parses a lanpo invocation against the command tree without
// running it: the commands must exist and every flag must be one of
// theirs with a value of its type (urfave parses them, then shows help).
// The inner command of launch (after --) is checked the same way. A
// shell variable stands for a value the shell supplies: it is read as 1.
func checkCall(args []string) error {
	app := newApp()
	cmds, path := app.Commands, []string{}
	var cmd *cli.Command
	rest := args
	for len(rest) > 0 {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(rest[0]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd, cmds, path, rest = next, next.Subcommands, append(path, rest[0]), rest[1:]
	}
	switch {
	case cmd == nil && len(args) == 0:
		return nil // lanpo alone prints its help
	case len(rest) > 0 && strings.ToUpper(rest[0]) == rest[0] && !strings.HasPrefix(rest[0], "-"):
		return nil // a placeholder: lanpo COMMAND ARGS...
	case cmd == nil:
		return fmt.Errorf("%q is not a lanpo command", args[0])
	case len(cmd.Subcommands) > 0 && len(rest) > 0 && !strings.HasPrefix(rest[0], "-"):
		return fmt.Errorf("%q is not a command of lanpo %s", rest[0], strings.Join(path, " "))
	}
	flags := map[string]cli.Flag{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			flags[n] = f
		}
	}
	var parsed []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			if cmd.Name == "launch" {
				if err := checkCall(rest[i+1:]); err != nil {
					return fmt.Errorf("launch's command: %w", err)
				}
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a positional argument
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		if !ok {
			return fmt.Errorf("lanpo %s has no flag %s", strings.Join(path, " "), a)
		}
		if hasValue {
			parsed = append(parsed, "--"+name+"="+shellValue(value))
			continue
		}
		parsed = append(parsed, "--"+name)
		if df, ok := f.(cli.DocGenerationFlag); ok && df.TakesValue() && i+1 < len(rest) {
			i++
			parsed = append(parsed, shellValue(rest[i]))
		}
	}
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	app.Before = nil
	err := app.Run(append(append(append([]string{"lanpo"}, path...), parsed...), "--help"))
	if err != nil {
		return fmt.Errorf("lanpo %s %s: %w", strings.Join(path, " "), strings.Join(parsed, " "), err)
	}
	return nil
}

// shellValue is a flag value as the shell would give it: a variable's
// value is not known here, so one that any flag type accepts.
func shellValue(v string) string {
	if strings.HasPrefix(v, "$") {
		return "1"
	}
	return v
}

// exampleWorkspace builds the stand-ins docSubstitutions names and
// returns the workspace and the environment examples run in.
func exampleWorkspace(t *testing.T) (string, []string) {
	t.Helper()
	ws := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, text string) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755))
		must(os.WriteFile(filepath.Join(ws, name), []byte(text), 0o644))
	}
	// bin/lanpo and lanpo: this test binary as the command (TestMain).
	write("bin/lanpo", fmt.Sprintf("#!/bin/sh\nLANPO_TEST_AS_CLI=1 exec %q \"$@\"\n", os.Args[0]))
	must(os.Chmod(filepath.Join(ws, "bin", "lanpo"), 0o755))
	must(os.Symlink(filepath.Join(repo, "configs"), filepath.Join(ws, "configs")))
	must(os.Symlink(filepath.Join(repo, "cmd", "lanpo", "testdata", "shared-data"), filepath.Join(ws, "shared-data")))
	must(os.MkdirAll(filepath.Join(ws, "tmp"), 0o755))
	// tiny: the warmed built-in model; qwen: a random Qwen3 with the real
	// tokenizer.
	tiny := copyWarmTiny(t, ws)
	must(os.MkdirAll(filepath.Join(ws, "models"), 0o755))
	must(os.Symlink(tiny, filepath.Join(ws, "models", "Qwen2.5-1.5B-Instruct")))
	qwen := filepath.Join(ws, "qwen")
	write("qwen/config.json", `{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
 "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": true,
 "hidden_act": "silu", "eos_token_id": 151645, "torch_dtype": "float32"}`)
	mc, err := model.LoadConfig(filepath.Join(qwen, "config.json"))
	must(err)
	m, err := model.NewRandom(mc, model.LoadOptions{}, 1)
	must(err)
	must(m.Save(qwen))
	m.Close()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		must(fsutil.CopyFile(filepath.Join(qwen3Tokenizer(t), f), filepath.Join(qwen, f)))
	}
	// Data: arithmetic problems under every benchmark's file name.
	arith, err := os.ReadFile(filepath.Join(repo, "configs", "data", "tiny-arith-lanpo.jsonl"))
	must(err)
	write("problems.jsonl", string(arith))
	// Four of the benchmarks' problems are in the training file (the
	// decontamination example drops them), twelve are MATH's.
	math, err := os.ReadFile(filepath.Join(repo, "cmd", "lanpo", "testdata", "shared-data", "math_train.jsonl"))
	must(err)
	write("data/math_train.jsonl", strings.Join(strings.SplitN(string(arith), "\n", 5)[:4], "\n")+"\n"+string(math))
	for _, f := range []string{"aime24.jsonl", "aime25.jsonl", "amc23.jsonl", "math500.jsonl", "gsm8k_test.jsonl", "minerva_math.jsonl", "olympiadbench.jsonl"} {
		write("data/"+f, string(arith))
	}
	write("prompts.jsonl", `{"messages": [{"role": "user", "content": "What is 1 + 2?"}]}`+"\n"+`{"prompt": "2+2="}`+"\n")
	// Configs: LANPO on the tiny model, two steps of four prompts.
	const tinyRun = "model: tiny\ndata:\n  train: problems.jsonl\nrollout:\n  prompts_per_step: 4\n  max_new_tokens: 32\n" +
		"algo:\n  name: lanpo\ncheckpoint:\n  every: 1\n"
	write("run.yaml", tinyRun)
	write("my.yaml", tinyRun)
	write("my-run.yaml", tinyRun+"eval:\n  bench: [gsm8k]\n  data_dir: data\n")
	env := append(os.Environ(), "PATH="+filepath.Join(ws, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"), "LANPO_DATA=data", "HOME="+filepath.Join(ws, "tmp"))
	cmd := exec.Command(filepath.Join(ws, "bin", "lanpo"), "--log-level", "warn", "train", "--config", "run.yaml", "--set", "run_dir=runs/x")
	cmd.Dir, cmd.Env = ws, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("runs/x: %v\n%s", err, out)
	}
	return ws, env
}

// TestDocExamples runs every shell example of README.md and docs/*.md
// that is not marked, in document order in one workspace (later examples
// read what earlier ones wrote), and checks that each exits 0; and it
// parses every example's lanpo commands, marked or not, against the
// command tree.
func TestDocExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	var all []docExample
	for _, f := range files {
		all = append(all, docExamples(t, f)...)
	}
	var run, marked []docExample
	for _, ex := range all {
		calls := lanpoCalls(ex.text)
		if len(calls) == 0 {
			t.Errorf("%s: no lanpo command found in %q", ex.where, ex.text)
		}
		for _, call := range calls {
			if err := checkCall(call); err != nil {
				t.Errorf("%s: %s: %v", ex.where, ex.text, err)
			}
		}
		if ex.notRun != "" {
			marked = append(marked, ex)
		} else {
			run = append(run, ex)
		}
	}
	if len(run) < 40 || len(marked) < 10 {
		t.Fatalf("%d examples to run and %d marked: the scan of the documents is broken", len(run), len(marked))
	}
	if t.Failed() {
		return
	}
	base, env := exampleWorkspace(t)
	repo, _ := filepath.Abs("../..")
	substitute := func(text string) string { return substituteDoc(text, docSubstitutions, repo) }
	bash := func(ws, script string) ([]byte, error) {
		cmd := exec.Command("bash", "-c", "set -eo pipefail\n"+script+"\n")
		cmd.Dir, cmd.Env = ws, env
		return cmd.CombinedOutput()
	}
	// Each document runs in its own copy of the workspace, as a reader
	// following it would: in document order, later examples reading what
	// earlier ones wrote.
	workspaces := map[string]string{}
	checked := make([]bool, len(docChecks))
	for _, ex := range run {
		doc := ex.where[:strings.LastIndexByte(ex.where, ':')]
		ws, ok := workspaces[doc]
		if !ok {
			ws = filepath.Join(t.TempDir(), "ws")
			if out, err := exec.Command("cp", "-a", base, ws).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			workspaces[doc] = ws
			for _, setup := range docSetup[filepath.Base(doc)] {
				if out, err := bash(ws, setup); err != nil {
					t.Fatalf("%s's setup %q: %v\n%s", doc, setup, err, tail(out, 3000))
				}
			}
		}
		text := substitute(ex.text)
		start := time.Now()
		out, err := bash(ws, substitute(strings.Join(ex.setup, "\n"))+"\n"+text)
		t.Logf("%s: %.1f s: %s", ex.where, time.Since(start).Seconds(), text)
		if err != nil {
			t.Errorf("%s: %s\nran: %s\n%v\n%s", ex.where, ex.text, text, err, tail(out, 3000))
			continue
		}
		for i, c := range docChecks {
			if strings.Contains(ex.text, c.text) {
				checked[i] = true
				if err := c.check(ws); err != nil {
					t.Errorf("%s: %s: %v", ex.where, ex.text, err)
				}
			}
		}
	}
	for i, c := range docChecks {
		if !checked[i] {
			t.Errorf("the check after %q ran after no example", c.text)
		}
	}
	t.Logf("%d examples run, %d marked not runnable here:", len(run), len(marked))
	for _, ex := range marked {
		t.Logf("  %s: %s — %s", ex.where, ex.text, ex.notRun)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// helpExamples lists the commands each command's description shows:
// "Example: lanpo …", indented lines that start with lanpo (continuation
// lines joined) and `lanpo …` spans.
func helpExamples(cmds []*cli.Command, prefix string) map[string][]string {
	out := map[string][]string{}
	span := regexp.MustCompile("`((?:torchrun[^`]*?)?lanpo [^`]+)`")
	for _, c := range cmds {
		name := strings.TrimSpace(prefix + " " + c.Name)
		sc := bufio.NewScanner(strings.NewReader(c.Description))
		for sc.Scan() {
			line := sc.Text()
			for strings.HasSuffix(line, "\\") && sc.Scan() {
				line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
			}
			if _, ex, ok := strings.Cut(line, "Example: "); ok {
				out[name] = append(out[name], ex)
			} else if t := strings.TrimSpace(line); strings.HasPrefix(t, "lanpo ") && strings.HasPrefix(line, "  ") {
				out[name] = append(out[name], t)
			}
			for _, m := range span.FindAllStringSubmatch(line, -1) {
				out[name] = append(out[name], m[1])
			}
		}
		for k, v := range helpExamples(c.Subcommands, name) {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

// TestDocSubstitutionsIgnoreTheCheckout: an example comes out the same
// wherever the checkout lives — a path put in for {repo} is not rewritten
// by a later entry (/tmp/ made a clone under /tmp read
// tmp/…/reward/testdata/), while entries still chain as the table means.
func TestDocSubstitutionsIgnoreTheCheckout(t *testing.T) {
	for _, c := range []struct{ repo, text, want string }{
		{"/tmp/fresh", "make build && bin/lanpo bench verify --data reward/testdata/verify_corpus.jsonl --hf-python /tmp/mv/bin/python",
			"bin/lanpo bench verify --data /tmp/fresh/reward/testdata/verify_corpus.jsonl --hf-python tmp/mv/bin/python"},
		{"/tmp/DIR/step-000100/bench logprob", "bin/lanpo bench verify --data reward/testdata/x.jsonl",
			"bin/lanpo bench verify --data /tmp/DIR/step-000100/bench logprob/reward/testdata/x.jsonl"},
		{"/tmp/fresh", "bin/lanpo bench logprob --n 2048 --hidden 896 --v 151936", "bin/lanpo bench logprob --n 64 --hidden 32 --v 512"},
	} {
		if got := substituteDoc(c.text, docSubstitutions, c.repo); got != c.want {
			t.Errorf("checkout %s: %q\nbecame %q\nwant   %q", c.repo, c.text, got, c.want)
		}
	}
	// Every example of the documents, under two checkouts.
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range append(files, "../../README.md") {
		for _, ex := range docExamples(t, f) {
			text := strings.Join(append(ex.setup, ex.text), "\n")
			a := strings.ReplaceAll(substituteDoc(text, docSubstitutions, "/work/lanpo"), "/work/lanpo", "{repo}")
			b := strings.ReplaceAll(substituteDoc(text, docSubstitutions, "/tmp/DIR/lanpo"), "/tmp/DIR/lanpo", "{repo}")
			if a != b {
				t.Errorf("%s: %q depends on the checkout:\n%q\n%q", ex.where, ex.text, a, b)
			}
			n++
		}
	}
	if n < 50 {
		t.Fatalf("%d examples found: the scan is broken", n)
	}
}

// TestHelpExamples: the commands every --help shows exist, with their
// flags.
func TestHelpExamples(t *testing.T) {
	n := 0
	for cmd, exs := range helpExamples(newApp().Commands, "") {
		for _, ex := range exs {
			for _, call := range lanpoCalls(ex) {
				n++
				if err := checkCall(call); err != nil {
					t.Errorf("lanpo %s --help shows %q: %v", cmd, ex, err)
				}
			}
		}
	}
	if n < 15 {
		t.Fatalf("%d commands found in the help texts: the scan is broken", n)
	}
}

// TestCheckCallFindsBadFlags: the parse check refuses a renamed flag, an
// unknown command and a value of the wrong type, inside launch too.
func TestCheckCallFindsBadFlags(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"bin/lanpo bench logprob --n 2048 --hidden 896 --v 151936", true},
		{"bin/lanpo bench logprob --h 896", false},
		{"bin/lanpo bench lgoprob", false},
		{"bin/lanpo train --config run.yaml --set a=b --dry-run", true},
		{"bin/lanpo train --config run.yaml --steps 3", false},
		{"bin/lanpo launch --nproc-per-node 4 -- train --config run.yaml", true},
		{"bin/lanpo launch --nproc-per-node four -- train --config run.yaml", false},
		{"bin/lanpo launch --nproc-per-node 4 -- train --cfg run.yaml", false},
		{"srun bin/lanpo launch --nnodes \"$SLURM_NNODES\" -- train --config run.yaml --resume auto", true},
		{"echo '{\"ids\":[1]}' | bin/lanpo score --model m > out.jsonl", true},
		{"lanpo pool query --text 'What is 7 + 5?' runs/x", true},
		{"docker run --rm --gpus all lanpo:cuda env --json", true},
		{"bin/lanpo generate --model m --stop '|' --hf-python '' < in.jsonl", false}, // generate has no --hf-python
		{"bin/lanpo bench generate --hf-python '' --json", true},
	} {
		var err error
		calls := lanpoCalls(c.line)
		if len(calls) != 1 {
			t.Errorf("%q: %d lanpo calls found, want 1", c.line, len(calls))
			continue
		}
		err = checkCall(calls[0])
		if (err == nil) != c.ok {
			t.Errorf("%q: %v (want ok %v)", c.line, err, c.ok)
		}
	}
}

// TestScriptCommands: the lanpo commands the Makefile and scripts/ run
// (make bench, the GPU bundle's validate.sh) exist with their flags — the
// fused log-prob benchmarks of both failed on a renamed flag.
func TestScriptCommands(t *testing.T) {
	files, err := filepath.Glob("../../scripts/*/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../Makefile")
	// validate.sh lists its benchmarks as "NAME|TIMEOUT|LANPO …" strings
	// (LANPO: the binary it runs).
	named := regexp.MustCompile(`"[\w.-]+\|(?:\d+\|)?((?:bin/lanpo|LANPO) [^"]*)"`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			at, line := i+1, lines[i]
			for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
			}
			if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.Contains(line, "-o bin/lanpo") || strings.Contains(line, "install ") ||
				strings.HasPrefix(strings.TrimSpace(line), "cp ") {
				continue
			}
			// scripts/demo/fair_test.sh runs "$lanpo" (bin/lanpo unless LANPO).
			line = strings.ReplaceAll(line, "$lanpo ", "bin/lanpo ")
			var calls [][]string
			if ms := named.FindAllStringSubmatch(line, -1); ms != nil {
				for _, m := range ms {
					calls = append(calls, lanpoCalls(strings.Replace(m[1], "LANPO", "bin/lanpo", 1))...)
				}
			} else {
				calls = lanpoCalls(line)
			}
			for _, c := range calls {
				n++
				if err := checkCall(c); err != nil {
					t.Errorf("%s:%d: %v", f, at, err)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d lanpo commands found in the Makefile and scripts/: the scan is broken", n)
	}
}

// TestFlagUsageHasNoBackticks: urfave/cli reads a backtick-quoted word in
// a flag's usage as its value's name and drops the backticks, so a code
// fence or `code` in a usage string prints garbled in --help.
func TestFlagUsageHasNoBackticks(t *testing.T) {
	var walk func(prefix string, cmds []*cli.Command)
	n := 0
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				n++
				if d, ok := f.(cli.DocGenerationFlag); ok && strings.Contains(d.GetUsage(), "`") {
					t.Errorf("lanpo %s%s --%s: usage %q has a backtick", prefix, c.Name, f.Names()[0], d.GetUsage())
				}
			}
			walk(prefix+c.Name+" ", c.Subcommands)
		}
	}
	walk("", newApp().Commands)
	if n < 50 {
		t.Fatalf("%d flags found: the walk is broken", n)
	}
}
