package feedback

import (
	"testing"

	"github.com/lanpo-rl/lanpo/internal/modeltest"
	"github.com/lanpo-rl/lanpo/internal/pooltest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// The fixtures these tests share with trainer's, set by main_test.go
// (package feedback_test, which may import trainer; this package may not).
var (
	// WarmTiny is the warmed-up tiny model's checkpoint directory.
	WarmTiny func(testing.TB) string
	// TinySettings are configs/tiny-lanpo.yaml's feedback settings with
	// config overrides (KEY=VALUE, as --set).
	TinySettings func(t testing.TB, sets ...string) Settings
	// LANPOProblems is the tiny LANPO data set.
	LANPOProblems func(testing.TB) []rl.Problem
	// WriteBuiltin writes a built-in model (trainer.WriteBuiltin).
	WriteBuiltin func(name, dir string, seed int64) error
)

// loadWarm loads the warmed tiny model on the test's locked thread.
func loadWarm(t *testing.T) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	return modeltest.Load(t, WarmTiny(t))
}

// seededPool is pooltest.Seeded's pool of the tiny LANPO data set.
// seededAbstraction builds a builder over the seeded pool with the tiny
// settings and sets, and runs abstraction for the first n of its problems.
func seededAbstraction(t *testing.T, m *model.Model, tk *tokenizer.Tokenizer, n int, sets ...string) (*Builder, Settings, []abstractionResult) {
	t.Helper()
	path, problems := seededPool(t)
	cfg := TinySettings(t, sets...)
	p, err := pool.Load(path, cfg.LANPO.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewBuilder(m, tk, cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	var items []abstractionItem
	for i, pr := range problems[:min(n, len(problems))] {
		items = append(items, abstractionItem{id: pr.ID, problem: pr.Problem, index: i})
	}
	res, err := f.abstraction(noPhases{}, items)
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg, res
}

func seededPool(t *testing.T) (string, []rl.Problem) {
	t.Helper()
	problems := LANPOProblems(t)
	return pooltest.Seeded(t, problems), problems
}
