package trainer

import (
	"context"
	"fmt"
	"slices"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
)

// GRPO as lanpo runs it, one step:
//
//  1. prompts: P problems from the data cursor, each rendered with the chat
//     template (the prompt ids are made once, when the data is loaded).
//  2. rollout: each prompt sampled G times by the rollout engine (no grad);
//     every sampled token's log-prob is recorded — that is π_old, since
//     sampler and trainer share the model code and kernels.
//  3. reward: decode, verify against the gold answer (reward/), plus an
//     optional format reward.
//  4. filter: with dynamic sampling (DAPO), groups whose rewards are all
//     equal are dropped and steps 1-3 repeat for more prompts; advantages
//     are group-normalized (GRPO) or mean-centred only (Dr. GRPO).
//  5. reference log-probs when β > 0 (the initial policy, frozen).
//  6. update: μ epochs; each is one optimizer step over the whole batch,
//     accumulated over micro-batches with token weights fixed for the
//     global batch, so the update does not depend on the micro-batch size.
//
// Deviations from the GRPO paper: one optimizer step per epoch over the
// whole batch (no mini-batches), π_old is the sampler's record instead of
// a second forward pass, and the loss aggregation is configurable.
//
// This file is the step top to bottom: step → collect (prompts, with an
// Explorer's context; rollout; reward; filter) → train (log-probs, update).
// Beside it: rollout.go (sampling, rewards, advantages, the step's
// statistics), logprobs.go (π_old and π_ref recomputed), update.go (the
// optimizer steps over micro-batches), explorer.go and term.go (the two
// seams a method plugs into), method.go (the methods' table).

// grpoRun holds a GRPO (or LANPO) run's long-lived objects.
type grpoRun struct {
	*session
	ref *model.Model // nil when β = 0, and under LoRA
	// refAdapters is the reference under LoRA with β > 0: the policy with
	// these adapters (hasRef).
	refAdapters model.AdapterMode
	problems    []Problem
	prompts     [][]int64 // each problem's prompt ids
	eos         []int64
	explorer    Explorer   // what the method changes while exploring (LANPO's feedback); nil for GRPO
	term        updateTerm // rows and a loss beside the policy's (term.go); nil: none
	stepTokens  struct{ prefilled, generated, trained int }
	scorer      reward.Scorer // reward.kind's
	// stepRewardErrors are this rank's rollouts of the step the reward
	// kind failed to score (scored 0 under reward.on_error zero), of
	// stepScored; firstRewardErr the first failure's reason.
	stepRewardErrors, stepScored int
	firstRewardErr               string
	tools                        toolLoop // the tools: section's (nil: one-turn rollouts)
}

// RunGRPO runs (or resumes) GRPO or LANPO training (algo.name) as cfg
// says. It returns ErrInterrupted after saving a checkpoint when ctx is
// cancelled.
func RunGRPO(ctx context.Context, cfg Config, resume string, opts RunOptions) error {
	// algo.name resolved first: the run's kind is its method's name.
	if err := cfg.Validate(); err != nil {
		return ConfigError{err}
	}
	if err := cfg.ResolveRun(cfg.Algo.Name); err != nil {
		return ConfigError{err}
	}
	s, err := openSession(cfg, resume, cfg.Algo.Name, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	g := &grpoRun{session: s}
	if g.problems, err = ReadProblems(cfg.Data.Train, cfg.Data); err != nil {
		return err
	}
	if err := chatData(&s.cfg.Data, g.problems); err != nil {
		return err
	}
	if err := g.renderPrompts(); err != nil {
		return err
	}
	if g.eos, err = s.m.EOSTokenIDs(); err != nil {
		return err
	}
	if g.scorer, err = reward.New(s.cfg.Reward, s.cfg.Algo.FormatReward); err != nil {
		return ConfigError{err}
	}
	defer g.scorer.Close()
	if g.tools, err = newToolLoop(s.cfg, s.tk, g.eos); err != nil {
		return err
	}
	if toolsForTest != nil {
		g.tools = toolsForTest()
	}
	if err := g.loadReference(); err != nil {
		return err
	}
	if g.ref != nil {
		defer g.ref.Close()
	}
	var evalPool *pool.Pool
	if m := methodNamed(s.cfg.Algo.Name); m.build != nil {
		parts, err := m.build(g)
		if err != nil {
			return err
		}
		g.explorer, g.term = parts.explorer, parts.term
		if g.explorer != nil {
			evalPool = g.explorer.Pool()
			s.saveExtra = append(s.saveExtra, g.explorer.Save)
		}
		if parts.save != nil {
			s.saveExtra = append(s.saveExtra, parts.save)
		}
		if g.term != nil {
			defer g.term.close()
		}
	}
	return s.loop(ctx, g.step, evalPool)
}

// loadReference prepares the KL term's reference (algo.kl_beta > 0): a
// second model, or under LoRA the policy with its adapters off (or at
// lora.init_from's values: trainer/lora.go).
func (g *grpoRun) loadReference() (err error) {
	cfg := g.cfg
	switch {
	case cfg.Algo.KLBeta == 0:
	case g.m.LoRA() != nil:
		g.refAdapters = model.AdaptersOff
		if cfg.LoRA.InitFrom != "" {
			g.refAdapters = model.AdaptersInitial
		}
	default:
		o := cfg.LoadOptions()
		if cfg.Algo.RefDevice != "" {
			o.Device, _ = ParseDevice(cfg.Algo.RefDevice) // parsed at load
			o.DType = g.m.DType
			if err := CheckDevice(o.Device); err != nil {
				return fmt.Errorf("config key algo.ref_device: %w", err)
			}
		}
		if g.ref, err = model.Load(g.modelDir, o); err != nil {
			return fmt.Errorf("reference model: %w", err)
		}
	}
	return nil
}

// renderPrompts tokenizes every problem's prompt once and checks that the
// prompt and the generation budget fit the model's context, naming the
// file and line of the first that does not.
func (g *grpoRun) renderPrompts() error {
	maxPos := g.m.Config.MaxPositionEmbeddings
	format := g.cfg.PromptFormat()
	g.prompts = make([][]int64, len(g.problems))
	for i, p := range g.problems {
		ids, err := format.SolveIDs(g.tk, p.Problem)
		if err != nil {
			return fmt.Errorf("%s: problem %s: %w", p.Where, p.ID, err)
		}
		if !g.fitsContext(len(ids) + g.cfg.Rollout.MaxNewTokens) {
			return fmt.Errorf("%s: problem %s: its prompt of %d tokens + rollout.max_new_tokens %d exceed the model's max_position_embeddings %d",
				p.Where, p.ID, len(ids), g.cfg.Rollout.MaxNewTokens, maxPos)
		}
		g.prompts[i] = ids
	}
	return nil
}

// fitsContext reports whether a sequence of n tokens fits the model's
// context.
func (g *grpoRun) fitsContext(n int) bool { return g.m.Config.Fits(n) }

// prefilled counts n prompt tokens a term prefilled in the step.
func (g *grpoRun) prefilled(n int) { g.stepTokens.prefilled += n }

// step runs one GRPO or LANPO step and returns its metrics (timings
// included).
func (g *grpoRun) step(t *phaseTimer) (StepMetrics, error) {
	var met StepMetrics
	g.stepTokens.prefilled, g.stepTokens.generated, g.stepTokens.trained = 0, 0, 0
	g.stepRewardErrors, g.stepScored, g.firstRewardErr = 0, 0, ""
	kept, sampled, stats, err := g.collect(t)
	if err != nil {
		return met, err
	}
	if err := g.checkScored(); err != nil {
		return met, err
	}
	g.fillMetrics(&met, stats)
	if g.cfg.Log.Rollouts {
		if err := g.logRollouts(sampled); err != nil {
			return met, err
		}
	}
	var rows []*rollout
	var tot termRows
	if g.term != nil {
		if kept, rows, tot, err = g.termRows(kept, sampled, t); err != nil {
			return met, err
		}
	}
	if met.GroupsKept == 0 && tot.rows == 0 {
		met.Skipped = true
		log.Warn().Int("step", g.state.Step+1).Msg("no group with reward variance: update skipped")
	} else if err := g.train(t, kept, rows, tot, &met); err != nil {
		return met, err
	}
	if g.explorer != nil {
		seen := make([]*rl.Rollout, len(sampled))
		for i, r := range sampled {
			seen[i] = &r.Rollout
		}
		if met.Explorer, err = g.explorer.Observe(g.state.Step, seen, t); err != nil {
			return met, err
		}
		pre, gen := g.explorer.Tokens()
		g.stepTokens.prefilled += pre
		g.stepTokens.generated += gen
	}
	tok, err := dist.SumFloats(g.comm, []float64{float64(g.stepTokens.prefilled), float64(g.stepTokens.generated), float64(g.stepTokens.trained), float64(g.stepRewardErrors)})
	if err != nil {
		return met, err
	}
	met.PrefillTokens, met.GenTokens, met.TrainedTokens, met.RewardErrors = int(tok[0]), int(tok[1]), int(tok[2]), int(tok[3])
	return met, nil
}

// termRows are the update term's rows of the step on this rank and their
// totals over every rank (one collective for the count, the tokens and
// the term's own sums).
func (g *grpoRun) termRows(kept, sampled []*rollout, ph rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	kept, rows, tot, err := g.term.rows(g.state.Step, kept, sampled, ph)
	if err != nil {
		return nil, nil, tot, err
	}
	all, err := dist.SumFloats(g.comm, append([]float64{float64(tot.rows), float64(tot.tokens)}, tot.sums...))
	if err != nil {
		return nil, nil, tot, err
	}
	tot.rows, tot.tokens, tot.sums = int(all[0]), int(all[1]), all[2:]
	return kept, rows, tot, nil
}

// collect runs rounds of prompts → rollout → reward → filter until P
// groups are kept (dynamic sampling drops zero-variance groups and draws
// more prompts, at most algo.max_resample extra rounds). Every rank draws
// the round's prompts alike and samples its share of them; it returns
// this rank's kept and sampled rollouts and the statistics of every
// rollout sampled on any rank, in global order.
func (g *grpoRun) collect(t *phaseTimer) (kept, sampled []*rollout, stats []rolloutStat, err error) {
	cfg := g.cfg
	P, G := cfg.Rollout.PromptsPerStep, cfg.Rollout.SamplesPerPrompt
	keptRolls := 0 // on every rank
	for round := 0; keptRolls/G < P && round <= cfg.Algo.MaxResample; round++ {
		t.Enter("prompts")
		idx := g.state.Cursor.Next(len(g.problems), P-keptRolls/G)
		lo, hi := dist.Share(len(idx), g.comm.Rank(), g.comm.Size())
		ps := make([]*rl.Prompt, 0, hi-lo)
		for i := lo; i < hi; i++ {
			k := idx[i]
			ps = append(ps, &rl.Prompt{Problem: k, Index: round*P + i, IDs: g.prompts[k], TrainIDs: g.prompts[k], Mode: rl.ModeScratch})
		}
		if g.explorer != nil {
			if err := g.explorer.AddContext(g.state.Step, ps, t); err != nil {
				return nil, nil, nil, err
			}
		}
		t.Enter("rollout")
		batch, err := g.rollout(ps)
		if err != nil {
			return nil, nil, nil, err
		}
		t.Enter("reward")
		if err := g.score(batch); err != nil {
			return nil, nil, nil, err
		}
		sampled = append(sampled, batch...)
		k := g.filterGroups(batch, round == cfg.Algo.MaxResample)
		kept = append(kept, k...)
		all, err := g.exchangeStats(batch, k)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("round %d: %w", round, err)
		}
		for _, st := range all {
			if st.Kept {
				keptRolls++
			}
		}
		stats = append(stats, all...)
	}
	return kept, sampled, stats, nil
}

// train computes what the update needs besides the rollouts (π_old on the
// update's prompt when the sampler saw another, reference log-probs) and
// runs the update (with the update term's rows: term.go).
func (g *grpoRun) train(t *phaseTimer, kept, rows []*rollout, tot termRows, met *StepMetrics) error {
	// Only an explorer gives prompts another training prompt: plain GRPO
	// needs no collective to know there is none.
	other := false
	if g.explorer != nil {
		var err error
		if other, err = dist.AnyRank(g.comm, slices.ContainsFunc(kept, otherPrompt)); err != nil {
			return err
		}
	}
	if g.cfg.Algo.RecomputeOldLogp || other {
		t.Enter("old_logprobs")
		if err := g.recomputeOld(kept, met); err != nil {
			return err
		}
	}
	if g.cfg.Algo.KLBeta > 0 {
		t.Enter("ref_logprobs")
		if err := g.refLogprobs(kept); err != nil {
			return err
		}
	}
	t.Enter("update")
	return g.update(kept, rows, tot, met)
}
