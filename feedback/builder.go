package feedback

import (
	"fmt"
	"strings"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// Builder builds LANPO's prompts from an experience pool: reflection on
// an earlier attempt, abstraction (retrieval, the relevance filter, a plan
// the model condenses from related problems' lessons), and the model's
// structured summaries of its attempts. A training run (Explorer), lanpo
// eval's retrieval and self-correct modes and lanpo seed share it, so
// evaluation and seeding ask exactly what training asks. Not safe for
// concurrent use; torch work runs on the caller's thread.
type Builder struct {
	m       *model.Model
	tk      *tokenizer.Tokenizer
	cfg     Config
	format  rl.PromptFormat
	maxNew  int // rollout.max_new_tokens: a prompt must leave room for it
	pool    *pool.Pool
	prompts pool.Prompts
	scorer  relevanceScorer
	stopIDs []int64 // end auxiliary text: the model's stop ids and every special token
	seed    uint64
	genOpt  model.GenerateOptions // rollout's memory caps
	step    int                   // keys the random streams of auxiliary generation (the training step; 0 in eval)
	gold    map[string]string     // training problems' answers, stripped from lessons (nil: none known)
	// allItems, when set (data parallelism), gathers every rank's
	// abstraction items in global prompt order. Relevance is scored over
	// that global set on every rank, so a pair's score — which depends on
	// the set scored with it (the embedding scorer's centre, its length
	// batches) — is the same for any number of ranks. Every rank must call
	// abstraction each round, with or without items of its own.
	allItems func([]abstractionItem) ([]abstractionItem, error)
	met      Metrics // counters since the last reset
	tokens   struct{ prefilled, generated int }
}

// Settings are what the builder takes from a run's config: the lanpo
// section, how a problem becomes the solve prompt, and the rollout's
// budget, memory caps and seed.
type Settings struct {
	LANPO        Config
	Format       rl.PromptFormat
	MaxNewTokens int // rollout.max_new_tokens
	Generate     model.GenerateOptions
	Seed         uint64
}

// NewBuilder prepares prompts for m; p may be nil when only reflection is
// wanted.
func NewBuilder(m *model.Model, tk *tokenizer.Tokenizer, s Settings, p *pool.Pool) (*Builder, error) {
	f := &Builder{m: m, tk: tk, cfg: s.LANPO, format: s.Format, maxNew: s.MaxNewTokens,
		pool: p, seed: s.Seed, genOpt: s.Generate}
	f.cfg.Resolve(s.MaxNewTokens)
	var err error
	if f.prompts, err = pool.PromptsFor(f.cfg.Code, f.cfg.Prompts); err != nil {
		return nil, fmt.Errorf("config key lanpo.prompts: %w", err)
	}
	eos, err := m.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	f.stopIDs = append(eos, tokenizer.Int64s(tk.SpecialIDs())...)
	env := scorerEnv{m: m, tk: tk, prompts: f.prompts, maxContext: f.cfg.MaxContextTokens, thinking: f.format.EnableThinking, prefilled: &f.tokens.prefilled}
	if env.centre, err = centreTexts(f.cfg.EmbeddingCentre); err != nil {
		return nil, fmt.Errorf("config key lanpo.embedding_centre: %w", err)
	}
	if f.scorer, err = scorerNamed(f.cfg.Similarity, env); err != nil {
		return nil, fmt.Errorf("config key lanpo.similarity: %w", err)
	}
	return f, nil
}

// noPhases times nothing (outside a training step).
type noPhases struct{}

func (noPhases) Enter(string) {}

// withContext renders problem + context as a solve prompt; ok is false
// (a fallback, counted) when it would not fit the model's context with the
// generation budget.
func (f *Builder) withContext(problem, context string) (ids []int64, ok bool, err error) {
	if ids, err = f.format.SolveIDs(f.tk, pool.WithContext(problem, context)); err != nil {
		return nil, false, err
	}
	if !f.m.Config.Fits(len(ids) + f.maxNew) {
		f.met.FallbackTooLong++
		return nil, false, nil
	}
	return ids, true, nil
}

// reflection renders the problem with an earlier attempt to critique and
// redo, and returns what it shows of the attempt (attemptText). The
// attempt comes in as a pool.Attempt — text only, no outcome.
func (f *Builder) reflection(problem string, a pool.Attempt) (ids []int64, shown string, ok bool, err error) {
	if shown, ok, err = f.attemptText(problem, a.Text); err != nil || !ok {
		return nil, "", false, err
	}
	a.Text = shown
	ids, ok, err = f.withContext(problem, f.prompts.ReflectionContext(a))
	return ids, shown, ok, err
}

// minAttemptTokens: a reflection prompt whose context leaves less room
// than this (or than lanpo.max_attempt_tokens, when smaller) for the
// attempt is not made (a fallback, counted).
const minAttemptTokens = 32

// attemptText is the one rule for how much of an earlier attempt a
// reflection prompt shows, used by training and by lanpo eval's
// self-correct mode: the whole attempt, up to lanpo.max_attempt_tokens
// (default rollout.max_new_tokens: all of it) and up to what the model's
// context leaves beside the rest of the prompt and the generation budget;
// beyond that its beginning and its end around a marker (the setup and the
// final answer both matter to a critique). ok is false when the context
// leaves less than minAttemptTokens.
func (f *Builder) attemptText(problem, attempt string) (text string, ok bool, err error) {
	text, n := f.tk.StripAddedTokens(attempt)
	f.met.SpecialRemoved += n
	budget := f.cfg.MaxAttemptTokens
	if mp := int(f.m.Config.MaxPositionEmbeddings); mp > 0 {
		empty, err := f.format.SolveIDs(f.tk, pool.WithContext(problem, f.prompts.ReflectionContext(pool.Attempt{})))
		if err != nil {
			return "", false, err
		}
		// A few tokens of slack: the attempt's first and last tokens may
		// merge differently with the template's text around them.
		budget = min(budget, mp-f.maxNew-len(empty)-4)
	}
	if budget < min(minAttemptTokens, f.cfg.MaxAttemptTokens) {
		f.met.FallbackTooLong++
		return "", false, nil
	}
	text, cut := clipText(f.tk, text, budget)
	if cut {
		f.met.AttemptsCut++
	}
	return text, true, nil
}

// Solve is a bare problem's prompt (ids, with the assistant header).
func (f *Builder) Solve(problem string) ([]int64, error) {
	return f.format.SolveIDs(f.tk, problem)
}

// SolveFits reports the length of a problem's solve prompt and whether it
// and the generation budget fit the model's context: what lanpo eval and
// lanpo seed check for every problem before the first forward pass.
func (f *Builder) SolveFits(problem string) (promptTokens int, fits bool, err error) {
	ids, err := f.Solve(problem)
	if err != nil {
		return 0, false, err
	}
	return len(ids), f.m.Config.Fits(len(ids) + f.maxNew), nil
}

// ContextLimit is the model's max_position_embeddings and the generation
// budget the builder's prompts leave room for.
func (f *Builder) ContextLimit() (maxPos int64, maxNew int) {
	return f.m.Config.MaxPositionEmbeddings, f.maxNew
}

// TooLong is the error for the problems SolveFits found too long, each
// named as the caller names problems: how many, the first three, and fix
// (what the user can do).
func (f *Builder) TooLong(named []string, fix string) error {
	return fmt.Errorf("%d problems' prompts and max_new_tokens %d do not fit the model's context (max_position_embeddings %d): %s; %s",
		len(named), f.maxNew, f.m.Config.MaxPositionEmbeddings, strings.Join(named[:min(3, len(named))], ", "), fix)
}

// Reflection is the problem's prompt with an earlier attempt to critique and
// redo, the training run's reflection prompt; ok is false when it does not
// fit the model's context.
func (f *Builder) Reflection(problem, attempt string) (ids []int64, ok bool, err error) {
	ids, _, ok, err = f.reflection(problem, pool.Attempt{Text: attempt})
	return ids, ok, err
}

// Counters returns LANPO's counters (fallbacks, retrieval, truncation,
// tokens) since the last call and resets them.
func (f *Builder) Counters() (m Metrics, prefilled, generated int) {
	m, prefilled, generated = f.met, f.tokens.prefilled, f.tokens.generated
	f.met, f.tokens.prefilled, f.tokens.generated = Metrics{}, 0, 0
	return m, prefilled, generated
}

// The builder's parts, for lanpo seed (which writes what training asks as
// SFT examples).

// SetStep keys the random streams of auxiliary generation that follow
// (summaries, plans): training's step, or seed's batch.
func (f *Builder) SetStep(step int) { f.step = step }

// Pool is the builder's pool (nil: none).
func (f *Builder) Pool() *pool.Pool { return f.pool }

// Prompts are the prompt texts in use (lanpo.prompts over the defaults:
// pool.CodePrompts in a code run, else pool.DefaultPrompts).
func (f *Builder) Prompts() pool.Prompts { return f.prompts }

// ModelText is text a model wrote as a prompt would show it: added-token
// strings removed, cut to lanpo.max_context_tokens.
func (f *Builder) ModelText(text string) string { return f.modelText(text) }

// TokenCount is the length of text in tokens.
func (f *Builder) TokenCount(text string) int { return f.tokenCount(text) }

// Summarize writes the policy's structured summary of each attempt at its
// problem (correct: its outcome), in one decode per attempt; indexes key
// each attempt's random stream.
func (f *Builder) Summarize(problems, attempts []string, correct []bool, indexes []int) ([]pool.Summary, error) {
	return f.summarize(problems, attempts, correct, indexes)
}

// Reflect is Reflection that also returns what the prompt shows of the
// attempt.
func (f *Builder) Reflect(problem string, a pool.Attempt) (ids []int64, shown string, ok bool, err error) {
	return f.reflection(problem, a)
}
