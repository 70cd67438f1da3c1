package eval_test

import (
	"os"
	"testing"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/trainer"
)

func TestMain(m *testing.M) {
	eval.WriteBuiltin = trainer.WriteBuiltin
	eval.DefaultFeedback = func() feedback.Settings { return trainer.DefaultConfig().FeedbackSettings() }
	os.Exit(m.Run())
}
