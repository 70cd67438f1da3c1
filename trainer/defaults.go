package trainer

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
)

// DefaultSFTMaxLen is the longest SFT example, in tokens, when sft.max_len
// is unset and the model's context is longer.
const DefaultSFTMaxLen = 2048

// ResolveRun fills the defaults of a run (kind sft, grpo or lanpo) that
// depend on its data and model rather than on other keys, which Resolve
// cannot see: total_steps 0 is one pass over data.train (its problems
// divided by rollout.prompts_per_step, or its conversations by
// sft.micro_batch_size × sft.grad_accum, rounded up), and sft.max_len 0 is
// the model's max_position_embeddings, at most DefaultSFTMaxLen. RunSFT
// and RunGRPO call it before the run starts, lanpo train --dry-run before
// it prints the config, so the resolved config names the numbers used.
func (c *Config) ResolveRun(kind string) error {
	if kind != "sft" && c.LoRA.On() && c.LoRA.Dropout > 0 {
		return bad("lora.dropout", "must be 0 for %s: with dropout the update's log-probs would be those of another network than the one that sampled (π_old ≠ the sampler's policy); it is for lanpo sft", kind)
	}
	if c.TotalSteps == 0 {
		if c.Data.Train == "" {
			return bad("total_steps", "is 0 (one pass over data.train) but data.train is not set")
		}
		var n, per int
		if kind == "sft" {
			per = c.SFT.MicroBatchSize * c.SFT.GradAccum
			if err := jsonl.File(c.Data.Train, func(int, []byte) error { n++; return nil }); err != nil {
				return err
			}
		} else {
			per = c.Rollout.PromptsPerStep
			problems, err := ReadProblems(c.Data.Train, c.Data)
			if err != nil {
				return err
			}
			n = len(problems)
		}
		if n == 0 {
			return bad("total_steps", "is 0 (one pass over data.train), and %s holds nothing", c.Data.Train)
		}
		c.TotalSteps = (n + per - 1) / per
		log.Info().Int("total_steps", c.TotalSteps).Int("records", n).Int("per_step", per).Str("data", c.Data.Train).Msg("total_steps unset: one pass over data.train")
	}
	if kind == "sft" && c.SFT.MaxLen == 0 {
		ctx, err := c.modelContext()
		if err != nil {
			return err
		}
		c.SFT.MaxLen = DefaultSFTMaxLen
		if ctx > 0 && ctx < DefaultSFTMaxLen {
			c.SFT.MaxLen = int(ctx)
		}
	}
	return nil
}

// modelContext is the max_position_embeddings of the model the config
// names (a builtin's from its shape), 0 where the config.json gives none.
func (c *Config) modelContext() (int64, error) {
	if name, ok := strings.CutPrefix(c.Model, builtinPrefix); ok {
		shape, ok := builtinShapes[name]
		if !ok {
			return 0, bad("model", "%q: no such built-in model", c.Model)
		}
		return builtinConfig(shape, 0).MaxPositionEmbeddings, nil
	}
	mc, err := model.LoadConfig(filepath.Join(c.Model, "config.json"))
	if err != nil {
		return 0, fmt.Errorf("config key model: %w", err)
	}
	return mc.MaxPositionEmbeddings, nil
}
