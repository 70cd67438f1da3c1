// Package trainertest gives tests outside trainer (feedback, seed, eval,
// demo) the trainer tests' fixtures: the warmed-up tiny model and the tiny
// GRPO and LANPO configs. trainer's own tests keep their copy (an internal
// test cannot import a package that imports trainer).
package trainertest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/modeltest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/trainer"
)

// Root is the repository's root directory: the nearest directory above
// the test's working directory (its package's) that holds go.mod. (Not
// runtime.Caller's file name: with -trimpath it is the import path.)
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			panic("trainertest: no go.mod above " + dir)
		}
	}
}

// Path is a path under the repository's root.
func Path(rel string) string { return filepath.Join(Root(), rel) }

var warm struct {
	once sync.Once
	dir  string
	ckpt string
	err  error
}

// WarmTiny is a checkpoint of the built-in tiny model after 60 SFT steps
// on arithmetic chats (configs/tiny-sft.yaml), made once per test process
// in a temporary directory that Cleanup removes (call it from TestMain).
func WarmTiny(t testing.TB) string {
	t.Helper()
	warm.once.Do(func() {
		if warm.dir, warm.err = os.MkdirTemp("", "lanpo-warm-tiny-"); warm.err != nil {
			return
		}
		var cfg trainer.Config
		cfg, warm.err = trainer.LoadConfig(Path("configs/tiny-sft.yaml"), []string{"run_dir=" + filepath.Join(warm.dir, "sft"),
			"data.train=" + Path("configs/data/tiny-arith-sft.jsonl"), "data.eval=", "total_steps=60", "checkpoint.every=0", "checkpoint.keep=1"})
		if warm.err == nil {
			warm.err = trainer.RunSFT(context.Background(), cfg, "", trainer.RunOptions{})
		}
		warm.ckpt = filepath.Join(cfg.RunDir, "checkpoints", "step-000060")
	})
	if warm.err != nil {
		t.Fatalf("warming the tiny model: %v", warm.err)
	}
	return warm.ckpt
}

// Cleanup removes the warmed model's directory.
func Cleanup() {
	if warm.dir != "" {
		os.RemoveAll(warm.dir)
	}
}

// LANPOData is the tiny LANPO data set. (A function: a test binary that
// runs as the lanpo command from another directory imports this package
// too, and must not look for the repository when it starts.)
func LANPOData() string { return Path("configs/data/tiny-arith-lanpo.jsonl") }

// LANPOConfig is configs/tiny-lanpo.yaml from the warmed-up tiny model in
// a temporary directory, with overrides.
func LANPOConfig(t testing.TB, sets ...string) trainer.Config {
	t.Helper()
	cfg, err := trainer.LoadConfig(Path("configs/tiny-lanpo.yaml"), append([]string{
		"run_dir=" + filepath.Join(t.TempDir(), "run"), "data.train=" + LANPOData(), "model=" + WarmTiny(t), "total_steps=4",
		"checkpoint.every=1", "checkpoint.keep=10",
	}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// LoadWarm loads the warmed tiny model and its tokenizer on the test's
// locked thread (closed at its end).
func LoadWarm(t testing.TB) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	return modeltest.Load(t, WarmTiny(t))
}

// AssertResolved fails t unless cfg is resolved as every entry point's
// config must be before it is used: Resolve accepts it and changes nothing
// (a config whose derived defaults were never filled — the lanpo
// section's attempt caps, relevance floor and mode weights — is changed
// by it), and the pool section it gives is valid. what names the entry
// point in the failure.
func AssertResolved(t testing.TB, what string, cfg trainer.Config) {
	t.Helper()
	before := cfg.YAML()
	if err := cfg.Resolve(); err != nil {
		t.Errorf("%s: the config does not resolve: %v", what, err)
		return
	}
	if after := cfg.YAML(); after != before {
		t.Errorf("%s: the config was not resolved (Resolve changed it):\n%s", what, yamlDiff(before, after))
	}
	if err := cfg.LANPO.PoolConfig().Validate(); err != nil {
		t.Errorf("%s: its pool section: %v", what, err)
	}
}

// yamlDiff lists the lines of b that are not in a (the keys Resolve
// filled or changed).
func yamlDiff(a, b string) string {
	had := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		had[l] = true
	}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		if !had[l] {
			out = append(out, "  "+l)
		}
	}
	return strings.Join(out, "\n")
}
