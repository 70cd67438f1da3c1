package feedback

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
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
		pool: p, prompts: pool.DefaultPrompts(), seed: s.Seed, genOpt: s.Generate}
	f.cfg.resolve(s.MaxNewTokens)
	var err error
	if f.cfg.Prompts != "" {
		if f.prompts, err = pool.LoadPrompts(f.cfg.Prompts); err != nil {
			return nil, fmt.Errorf("config key lanpo.prompts: %w", err)
		}
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
	if mp := f.m.Config.MaxPositionEmbeddings; mp > 0 && int64(len(ids)+f.maxNew) > mp {
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

// abstractionItem is one problem to build an abstraction prompt for.
type abstractionItem struct {
	id, problem string // id "" for a problem outside the pool's training set
	index       int    // keys the condenser's random stream
}

// abstractionResult is one item's abstraction prompt (ids nil where nothing
// relevant was found or the prompt did not fit), with the plan, the
// lessons it was condensed from and every candidate with its relevance.
type abstractionResult struct {
	ids        []int64
	plan       string
	lessons    []pool.Lesson
	candidates []scoredCandidate
}

// scoredCandidate is a retrieval candidate with its relevance on the
// scorer's own scale (Raw; Relevance is on lanpo.similarity_scale) and
// the filter's decision.
type scoredCandidate struct {
	pool.Candidate
	Raw    float64
	Passed bool
}

// passes is the relevance filter: the relevance on lanpo.similarity_scale
// reaches γ, and the scorer's raw value reaches lanpo.relevance_floor — an
// absolute meaning of "related": the quantile scale alone compares
// retrieval's best candidates with random pairs, so something passes for
// almost every problem, related or not.
func (f *Builder) passes(scaled, raw float64) bool {
	return scaled >= f.cfg.SimilarityThreshold && raw >= *f.cfg.RelevanceFloor
}

// abstraction retrieves other problems for each item, keeps those whose
// relevance passes γ, has the model condense their lessons into a plan and
// renders the problem with it (fallbacks counted).
func (f *Builder) abstraction(ph rl.Phases, items []abstractionItem) (res []abstractionResult, err error) {
	ph.Enter("relevance")
	cands, raws, rel, err := f.candidateRelevance(items)
	if err != nil {
		return nil, err
	}
	ph.Enter("condense")
	res = make([]abstractionResult, len(items))
	var requests, prefixes []string
	var waiting, indexes []int
	var related [][]string // gold answers of each request's related problems (when known)
	for i, it := range items {
		scores := rel[i]
		var passed []pool.Candidate
		for j, c := range cands[i] {
			c.Relevance = scores[j]
			sc := scoredCandidate{Candidate: c, Raw: raws[i][j], Passed: f.passes(scores[j], raws[i][j])}
			res[i].candidates = append(res[i].candidates, sc)
			if sc.Passed {
				passed = append(passed, c)
			}
		}
		f.met.Candidates += len(cands[i])
		f.met.Passed += len(passed)
		for j, r := range scores {
			f.met.relevanceSum += r
			f.met.rawRelevanceSum += raws[i][j]
		}
		sort.SliceStable(passed, func(a, b int) bool { return passed[a].Relevance > passed[b].Relevance })
		passed = passed[:min(len(passed), f.cfg.MaxRelatedProblems)]
		var lessons []pool.Lesson
		var golds []string
		for _, c := range passed {
			for _, ls := range f.pool.Lessons(c.ProblemID, f.cfg.LessonsPerProblem, f.gold[c.ProblemID]) {
				ls.Principles, ls.Pitfalls = f.modelText(ls.Principles), f.modelText(ls.Pitfalls)
				lessons = append(lessons, ls)
			}
			if g := f.gold[c.ProblemID]; g != "" {
				golds = append(golds, g)
			}
		}
		if len(lessons) == 0 {
			f.met.FallbackNotRelevant++
			continue
		}
		req := f.prompts.CondenseRequest(it.problem, lessons)
		for len(lessons) > 1 && f.tokenCount(req) > f.cfg.MaxContextTokens {
			lessons = lessons[:len(lessons)-1] // the least relevant go first
			req = f.prompts.CondenseRequest(it.problem, lessons)
			f.met.ContextTruncated++
		}
		requests, prefixes = append(requests, req), append(prefixes, f.prompts.PlanHeader+" ")
		waiting, indexes, related = append(waiting, i), append(indexes, it.index), append(related, golds)
		res[i].lessons = lessons
	}
	if len(requests) == 0 {
		return res, nil
	}
	plans, err := f.generate(requests, prefixes, indexes, f.cfg.PlanTokens, nil, "plan")
	if err != nil {
		return nil, fmt.Errorf("condensing plans: %w", err)
	}
	for j, i := range waiting {
		// No foreign answers in the plan either: a condenser may copy one
		// from a lesson in a form the lesson's stripping did not catch.
		plan := pool.StripAnswers(f.modelText(plans[j]), items[i].problem, related[j]...)
		if plan == "" {
			f.met.FallbackNotRelevant++
			continue
		}
		if got, ok, err := f.withContext(items[i].problem, f.prompts.AbstractionContext(plan)); err != nil {
			return nil, err
		} else if ok {
			res[i].ids, res[i].plan = got, plan
		}
	}
	return res, nil
}

// candidateRelevance retrieves each item's candidates and scores them: the
// items of this call, or with allItems the global set of every rank's
// items (the scores of this call's items are returned).
func (f *Builder) candidateRelevance(items []abstractionItem) (cands [][]pool.Candidate, raws, scaled [][]float64, err error) {
	scored, mine := items, make([]int, len(items)) // mine[i]: items[i]'s place in scored
	for i := range mine {
		mine[i] = i
	}
	if f.allItems != nil {
		if scored, err = f.allItems(items); err != nil {
			return nil, nil, nil, fmt.Errorf("relevance: gathering every rank's problems: %w", err)
		}
		at := map[int]int{}
		for j, it := range scored {
			at[it.index] = j
		}
		for i, it := range items {
			mine[i] = at[it.index]
		}
	}
	var pairs []relevancePair
	all := make([][]pool.Candidate, len(scored))
	first := make([]int, len(scored)+1) // scored[j]'s pairs are pairs[first[j]:first[j+1]]
	for j, it := range scored {
		all[j] = f.pool.Candidates(it.id, it.problem, f.cfg.RetrievalCandidates)
		for _, c := range all[j] {
			pairs = append(pairs, relevancePair{query: it.problem, candidate: c.Text, bm25: c.Normalized})
		}
		first[j+1] = len(pairs)
	}
	raw, rel, err := f.relevance(pairs)
	if err != nil {
		return nil, nil, nil, err
	}
	cands, raws, scaled = make([][]pool.Candidate, len(items)), make([][]float64, len(items)), make([][]float64, len(items))
	for i, j := range mine {
		cands[i], raws[i], scaled[i] = all[j], raw[first[j]:first[j+1]], rel[first[j]:first[j+1]]
	}
	return cands, raws, scaled, nil
}

// relevance scores the pairs with the configured scorer, on the configured
// scale: raw, or the quantile of each score among the scores of random
// pairs of pool problems (reference pairs drawn from the seed and step, and
// scored by the same scorer at the same time, since the policy changes).
// It returns the scorer's raw values and the values on the scale.
func (f *Builder) relevance(pairs []relevancePair) (raw, scaled []float64, err error) {
	if len(pairs) == 0 {
		return nil, nil, nil
	}
	ref := f.referencePairs()
	all, err := f.scorer.score(append(append([]relevancePair(nil), pairs...), ref...))
	if err != nil {
		return nil, nil, fmt.Errorf("relevance (lanpo.similarity %s): %w", f.cfg.Similarity, err)
	}
	raw, refScores := all[:len(pairs)], all[len(pairs):]
	if f.cfg.SimilarityScale == scaleRaw {
		return raw, raw, nil
	}
	return raw, quantiles(raw, refScores), nil
}

// referencePairs draws lanpo.reference_pairs random pairs of distinct pool
// problems that are not near-duplicates (none for the raw scale).
func (f *Builder) referencePairs() []relevancePair {
	n := f.pool.Problems()
	if f.cfg.SimilarityScale != scaleQuantile || n < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(f.seed, rl.DrawKey(f.step, rl.StreamReferencePairs, "reference-pairs")))
	var out []relevancePair
	for tries := 0; len(out) < f.cfg.ReferencePairs && tries < 4*f.cfg.ReferencePairs; tries++ {
		i, j := rng.IntN(n), rng.IntN(n)
		if i == j {
			continue
		}
		_, qa := f.pool.ProblemAt(i)
		idb, qb := f.pool.ProblemAt(j)
		if pool.Similarity(qa, qb) >= f.cfg.NearDuplicate {
			continue
		}
		out = append(out, relevancePair{query: qa, candidate: qb, bm25: f.pool.NormalizedBM25(idb, qa)})
	}
	return out
}

// quantiles maps each score to the share of reference scores below it
// (ties count half); with no reference, nothing passes.
func quantiles(scores, ref []float64) []float64 {
	out := make([]float64, len(scores))
	if len(ref) == 0 {
		return out
	}
	sorted := append([]float64(nil), ref...)
	sort.Float64s(sorted)
	for i, s := range scores {
		below := sort.SearchFloat64s(sorted, s)
		equal := sort.SearchFloat64s(sorted, math.Nextafter(s, math.Inf(1))) - below
		out[i] = (float64(below) + 0.5*float64(equal)) / float64(len(sorted))
	}
	return out
}

// modelText prepares text a model wrote for a prompt: added-token strings
// removed (counted), cut to lanpo.max_context_tokens (counted).
func (f *Builder) modelText(text string) string {
	text, n := f.tk.StripAddedTokens(text)
	f.met.SpecialRemoved += n
	text, cut := clipText(f.tk, text, f.cfg.MaxContextTokens)
	if cut {
		f.met.ContextTruncated++
	}
	return text
}

// tokenCount is the length of text in tokens.
func (f *Builder) tokenCount(text string) int {
	ids, err := f.tk.Encode(strings.ToValidUTF8(text, "\uFFFD"), false)
	if err != nil {
		return len(text) // cannot happen on valid UTF-8; bytes are still a bound
	}
	return len(ids)
}

// clipText cuts text to at most n tokens, keeping its beginning and its end
// around a marker (an attempt's setup and its final answer both matter),
// and reports whether it cut. Invalid UTF-8 (a response decoded from a
// cut byte-level token) becomes U+FFFD first, so the cap always applies.
func clipText(tk *tokenizer.Tokenizer, text string, n int) (string, bool) {
	text = strings.ToValidUTF8(text, "\uFFFD")
	ids, err := tk.Encode(text, false)
	if err != nil {
		panic(fmt.Sprintf("clipText: encoding valid UTF-8 failed: %v", err))
	}
	if len(ids) <= n {
		return text, false
	}
	const marker = "\n[…]\n"
	head := (n - 4) / 2
	tail := n - 4 - head
	return tk.Decode(ids[:head], false) + marker + tk.Decode(ids[len(ids)-tail:], false), true
}

// generate completes, for each user message, an assistant turn that starts
// with the given prefix (not returned), with no grad, at
// lanpo.aux_temperature (0: greedy), for at most maxNew tokens, and cuts
// each text before the first stop string. indexes key each item's random
// stream, with the step and purpose.
func (f *Builder) generate(users, prefixes []string, indexes []int, maxNew int, stops []string, purpose string) ([]string, error) {
	res, err := f.sample(users, prefixes, indexes, model.SamplingParams{MaxNewTokens: maxNew, StopStrings: stops}, purpose)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(users))
	for _, s := range res {
		out[s.Prompt] = cutAtStops(f.tk.Decode(tokenizer.Ints(s.IDs), true), stops)
	}
	return out, nil
}

// cutAtStops is text before the first of stops, trimmed.
func cutAtStops(text string, stops []string) string {
	for _, st := range stops {
		if i := strings.Index(text, st); i >= 0 {
			text = text[:i]
		}
	}
	return strings.TrimSpace(text)
}

// sample runs one auxiliary generation: for each user message, an
// assistant turn starting with its prefix, with no grad, at
// lanpo.aux_temperature (0: greedy), ended by any special token (not
// before one real token: a weak model's most likely first token is often
// one of them, which would leave every text empty). p brings the budget,
// the stop strings or the segments; indexes key each item's random stream,
// with the step and purpose. Tokens are counted as prefilled and
// generated.
func (f *Builder) sample(users, prefixes []string, indexes []int, p model.SamplingParams, purpose string) ([]model.Sample, error) {
	reqs := make([]model.Request, len(users))
	for i, u := range users {
		ids, err := f.tk.ChatIDs(AuxChat(f.prompts, u), tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: f.format.EnableThinking})
		if err != nil {
			return nil, err
		}
		pre, err := f.tk.Encode(prefixes[i], false)
		if err != nil {
			return nil, err
		}
		reqs[i] = model.Request{PromptIDs: tokenizer.Int64s(append(ids, pre...)), Samples: 1}
		f.tokens.prefilled += len(ids) + len(pre)
	}
	p.Temperature, p.TopP, p.MinNewTokens, p.StopIDs = f.cfg.AuxTemperature, 1, 1, f.stopIDs
	p.Seed = rl.DrawKey(f.step, rl.StreamAux, purpose) ^ f.seed
	opt := f.genOpt
	opt.Detokenize = func() func(int64) string {
		s := f.tk.NewStream(true)
		return func(id int64) string { return s.Add(int(id)) }
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = f.m.GenerateAt(reqs, indexes, p, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, s := range res {
		f.tokens.generated += len(s.IDs)
	}
	return res, nil
}

// AuxChat is an auxiliary prompt's chat: the prompts' system message, if
// any, and the user message.
func AuxChat(p pool.Prompts, user string) []tokenizer.Message {
	var msgs []tokenizer.Message
	if p.System != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: p.System})
	}
	return append(msgs, tokenizer.Message{Role: "user", Content: user})
}

// Solve is a bare problem's prompt (ids, with the assistant header).
func (f *Builder) Solve(problem string) ([]int64, error) {
	return f.format.SolveIDs(f.tk, problem)
}

// Reflection is the problem's prompt with an earlier attempt to critique and
// redo, the training run's reflection prompt; ok is false when it does not
// fit the model's context.
func (f *Builder) Reflection(problem, attempt string) (ids []int64, ok bool, err error) {
	ids, _, ok, err = f.reflection(problem, pool.Attempt{Text: attempt})
	return ids, ok, err
}

// Abstraction is each problem's prompt with a plan condensed from related
// pool problems (retrieval, the γ filter and the condenser, as in
// training); nil where nothing passed γ or the prompt did not fit.
// indexes key the condenser's random streams.
func (f *Builder) Abstraction(problems []string, indexes []int) ([][]int64, error) {
	if f.pool == nil {
		return nil, fmt.Errorf("abstraction needs a pool")
	}
	plans, err := f.Plans(make([]string, len(problems)), problems, indexes)
	if err != nil {
		return nil, err
	}
	ids := make([][]int64, len(plans))
	for i, p := range plans {
		ids[i] = p.IDs
	}
	return ids, nil
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

// Prompts are the prompt texts in use (lanpo.prompts or the defaults).
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

// Plan is an abstraction prompt and what it was built from.
type Plan struct {
	IDs     []int64 // the solve prompt with the plan (nil: nothing relevant, or it did not fit)
	Text    string
	Lessons []pool.Lesson
}

// Plans builds each problem's abstraction prompt from related pool
// problems, as training does: ids are the problems' pool ids (their own
// entries are not retrieved; "" for a problem outside the pool), indexes
// key the condenser's random streams.
func (f *Builder) Plans(ids, problems []string, indexes []int) ([]Plan, error) {
	items := make([]abstractionItem, len(problems))
	for i, p := range problems {
		items[i] = abstractionItem{id: ids[i], problem: p, index: indexes[i]}
	}
	res, err := f.abstraction(noPhases{}, items)
	if err != nil {
		return nil, err
	}
	out := make([]Plan, len(res))
	for i, r := range res {
		out[i] = Plan{IDs: r.ids, Text: r.plan, Lessons: r.lessons}
	}
	return out, nil
}
