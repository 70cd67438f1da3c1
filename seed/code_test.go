package seed

import (
	"testing"

	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// TestSeedPromptsFollowTheRun: seed examples are rendered with the prompts
// training asks: the code prompts in a code run (lanpo's Code), the math
// defaults otherwise.
func TestSeedPromptsFollowTheRun(t *testing.T) {
	cfg := trainer.DefaultConfig()
	for code, want := range map[bool]pool.Prompts{false: pool.DefaultPrompts(), true: pool.CodePrompts()} {
		cfg.LANPO.Code = code
		b, err := NewBuilder(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Prompts() != want {
			t.Errorf("code %v: the seed renderer's prompts are not the run's", code)
		}
	}
}
