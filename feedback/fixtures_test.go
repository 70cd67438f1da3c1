package feedback

import (
	"testing"

	"github.com/lanpo-rl/lanpo/internal/modeltest"
	"github.com/lanpo-rl/lanpo/internal/pooltest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
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
func seededPool(t *testing.T) (string, []rl.Problem) {
	t.Helper()
	problems := LANPOProblems(t)
	return pooltest.Seeded(t, problems), problems
}
