package feedback_test

import (
	"os"
	"testing"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/trainertest"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/trainer"
)

func TestMain(m *testing.M) {
	feedback.WarmTiny = trainertest.WarmTiny
	feedback.TinySettings = func(t testing.TB, sets ...string) feedback.Settings {
		return trainertest.LANPOConfig(t, sets...).FeedbackSettings()
	}
	feedback.LANPOProblems = func(t testing.TB) []rl.Problem {
		ps, err := trainer.LoadProblems(trainertest.LANPOData(), false)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	feedback.WriteBuiltin = trainer.WriteBuiltin
	code := m.Run()
	trainertest.Cleanup()
	os.Exit(code)
}
