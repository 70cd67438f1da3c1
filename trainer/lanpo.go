package trainer

import (
	"github.com/lanpo-rl/lanpo/feedback"
)

// lanpoMethod is LANPO (algo.name lanpo): the feedback explorer
// (feedback.Explorer: the experience pool, reflection and abstraction,
// the contexts it gives prompts) and, with lanpo.consolidate > 0,
// consolidation's update term (consolidate.go). The lanpo section is
// owned, defaulted and validated by package feedback (feedback/config.go);
// it is checked whatever algo.name says, since lanpo eval and lanpo seed
// read it with any run's config.
var lanpoMethod = method{
	name:     AlgoLANPO,
	about:    "LANPO: GRPO with language feedback from an experience pool in context, and consolidation",
	section:  "lanpo",
	defaults: func(c *Config) { c.LANPO = feedback.Default() },
	validate: func(c *Config, _ bool) error { return c.LANPO.Validate(c.Rollout.MaxNewTokens) },
	build:    buildLANPO,
	metrics:  []any{feedback.Metrics{}, consolidationMetrics{}},
	groups: func(c Config) []string {
		if c.LANPO.Consolidate > 0 && c.LANPO.ConsolidateLR > 0 {
			return []string{consolidateGroup}
		}
		return nil
	},
}

// buildLANPO makes LANPO's explorer and, with lanpo.consolidate > 0, its
// consolidation term.
func buildLANPO(g *grpoRun) (methodParts, error) {
	fs := g.cfg.FeedbackSettings()
	fs.Format.Tools = g.cfg.PromptFormat().Tools // its rollouts' prompts, which the tool loop answers
	if g.hb != nil {
		fs.Generate.Progress = g.hb.decoded // summaries and plans are generations too
	}
	ex, err := feedback.NewExplorer(g.m, g.tk, fs, feedback.Run{Problems: g.problems,
		SamplesPerPrompt: g.cfg.Rollout.SamplesPerPrompt, Comm: g.comm, ResumedFrom: g.resumedFrom, Oracle: g.oracle})
	if err != nil {
		return methodParts{}, err
	}
	parts := methodParts{explorer: ex}
	if g.cfg.LANPO.Consolidate > 0 {
		parts.term = newConsolidation(g.view())
	}
	return parts, nil
}
