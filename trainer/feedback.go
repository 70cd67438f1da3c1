package trainer

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
)

// feedback builds LANPO's prompts from an experience pool: reflection on
// an earlier attempt, abstraction (retrieval, the relevance filter, a plan
// the model condenses from related problems' lessons), and the model's
// structured summaries of its attempts. A training run (lanpo.go) and
// lanpo eval's retrieval and self-correct modes (Feedback) share it, so
// evaluation asks exactly what training asked.
type feedback struct {
	m        *model.Model
	tk       *tokenizer.Tokenizer
	cfg      LANPOConfig
	data     DataConfig
	thinking *bool // rollout.enable_thinking
	maxNew   int   // rollout.max_new_tokens: a prompt must leave room for it
	pool     *pool.Pool
	prompts  pool.Prompts
	scorer   relevanceScorer
	stopIDs  []int64 // end auxiliary text: the model's stop ids and every special token
	seed     uint64
	genOpt   model.GenerateOptions // rollout's memory caps
	step     int                   // keys the random streams of auxiliary generation (the training step; 0 in eval)
	gold     map[string]string     // training problems' answers, stripped from lessons (nil: none known)
	met      LANPOMetrics          // counters since the last reset
	tokens   struct{ prefilled, generated int }
}

func newFeedback(m *model.Model, tk *tokenizer.Tokenizer, cfg Config, p *pool.Pool) (*feedback, error) {
	f := &feedback{m: m, tk: tk, cfg: cfg.LANPO, data: cfg.Data, thinking: cfg.Rollout.EnableThinking, maxNew: cfg.Rollout.MaxNewTokens,
		pool: p, prompts: pool.DefaultPrompts(), seed: cfg.Seed, genOpt: cfg.Rollout.GenerateOptions()}
	var err error
	if cfg.LANPO.Prompts != "" {
		if f.prompts, err = pool.LoadPrompts(cfg.LANPO.Prompts); err != nil {
			return nil, fmt.Errorf("config key lanpo.prompts: %w", err)
		}
	}
	eos, err := m.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	f.stopIDs = append(eos, tokenizer.Int64s(tk.SpecialIDs())...)
	env := scorerEnv{m: m, tk: tk, prompts: f.prompts, maxContext: cfg.LANPO.MaxContextTokens, thinking: f.thinking, prefilled: &f.tokens.prefilled}
	if f.scorer, err = scorerNamed(cfg.LANPO.Similarity, env); err != nil {
		return nil, fmt.Errorf("config key lanpo.similarity: %w", err)
	}
	return f, nil
}

// solveIDs renders a problem text (the problem, or the problem with a
// context block) as the chat the policy solves, with the assistant header.
func solveIDs(tk *tokenizer.Tokenizer, data DataConfig, thinking *bool, problem string) ([]int64, error) {
	var msgs []tokenizer.Message
	if data.SystemPrompt != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: data.SystemPrompt})
	}
	user := strings.ReplaceAll(data.PromptTemplate, "{problem}", problem)
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: user})
	ids, err := tk.ChatIDs(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: thinking})
	return tokenizer.Int64s(ids), err
}

// withContext renders problem + context as a solve prompt; ok is false
// (a fallback, counted) when it would not fit the model's context with the
// generation budget.
func (f *feedback) withContext(problem, context string) (ids []int64, ok bool, err error) {
	if ids, err = solveIDs(f.tk, f.data, f.thinking, pool.WithContext(problem, context)); err != nil {
		return nil, false, err
	}
	if mp := f.m.Config.MaxPositionEmbeddings; mp > 0 && int64(len(ids)+f.maxNew) > mp {
		f.met.FallbackTooLong++
		return nil, false, nil
	}
	return ids, true, nil
}

// reflection renders the problem with an earlier attempt to critique and
// redo. The attempt comes in as a pool.Attempt — text only, no outcome.
func (f *feedback) reflection(problem string, a pool.Attempt) ([]int64, bool, error) {
	a.Text = f.modelText(a.Text)
	return f.withContext(problem, f.prompts.ReflectionContext(a))
}

// abstractionItem is one problem to build an abstraction prompt for.
type abstractionItem struct {
	id, problem string // id "" for a problem outside the pool's training set
	index       int    // keys the condenser's random stream
}

// abstractionResult is one item's abstraction prompt (ids nil where nothing
// relevant was found or the prompt did not fit), with the plan and the
// lessons it was condensed from.
type abstractionResult struct {
	ids     []int64
	plan    string
	lessons []pool.Lesson
}

// abstraction retrieves other problems for each item, keeps those whose
// relevance passes γ, has the model condense their lessons into a plan and
// renders the problem with it (fallbacks counted).
func (f *feedback) abstraction(t *phaseTimer, items []abstractionItem) (res []abstractionResult, err error) {
	t.enter("relevance")
	var pairs []relevancePair
	cands := make([][]pool.Candidate, len(items))
	for i, it := range items {
		cands[i] = f.pool.Candidates(it.id, it.problem, f.cfg.RetrievalCandidates)
		for _, c := range cands[i] {
			pairs = append(pairs, relevancePair{query: it.problem, candidate: c.Text, bm25: c.Normalized})
		}
	}
	rel, err := f.relevance(pairs)
	if err != nil {
		return nil, err
	}
	t.enter("condense")
	res = make([]abstractionResult, len(items))
	var requests, prefixes []string
	var waiting, indexes []int
	var related [][]string // gold answers of each request's related problems (when known)
	k := 0
	for i, it := range items {
		scores := rel[k : k+len(cands[i])]
		k += len(cands[i])
		passed := pool.Relevant(cands[i], scores, f.cfg.SimilarityThreshold)
		f.met.Candidates += len(cands[i])
		f.met.Passed += len(passed)
		for _, r := range scores {
			f.met.relevanceSum += r
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
		plan := pool.StripAnswers(f.modelText(plans[j]), related[j]...)
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

// relevance scores the pairs with the configured scorer, on the configured
// scale: raw, or the quantile of each score among the scores of random
// pairs of pool problems (reference pairs drawn from the seed and step, and
// scored by the same scorer at the same time, since the policy changes).
func (f *feedback) relevance(pairs []relevancePair) ([]float64, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	ref := f.referencePairs()
	all, err := f.scorer.score(append(append([]relevancePair(nil), pairs...), ref...))
	if err != nil {
		return nil, fmt.Errorf("relevance (lanpo.similarity %s): %w", f.cfg.Similarity, err)
	}
	raw, refScores := all[:len(pairs)], all[len(pairs):]
	for _, r := range raw {
		f.met.rawRelevanceSum += r
	}
	if f.cfg.SimilarityScale == scaleRaw {
		return raw, nil
	}
	return quantiles(raw, refScores), nil
}

// referencePairs draws lanpo.reference_pairs random pairs of distinct pool
// problems that are not near-duplicates (none for the raw scale).
func (f *feedback) referencePairs() []relevancePair {
	n := f.pool.Problems()
	if f.cfg.SimilarityScale != scaleQuantile || n < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(f.seed, drawKey(f.step, -5, "reference-pairs")))
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
func (f *feedback) modelText(text string) string {
	text, n := f.tk.StripAddedTokens(text)
	f.met.SpecialRemoved += n
	text, cut := clipText(f.tk, text, f.cfg.MaxContextTokens)
	if cut {
		f.met.ContextTruncated++
	}
	return text
}

// tokenCount is the length of text in tokens.
func (f *feedback) tokenCount(text string) int {
	ids, err := f.tk.Encode(text, false)
	if err != nil {
		return len(text) // not valid UTF-8: count bytes, still a bound
	}
	return len(ids)
}

// clipText cuts text to at most n tokens, keeping its beginning and its end
// around a marker (an attempt's setup and its final answer both matter),
// and reports whether it cut.
func clipText(tk *tokenizer.Tokenizer, text string, n int) (string, bool) {
	ids, err := tk.Encode(text, false)
	if err != nil || len(ids) <= n {
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
func (f *feedback) generate(users, prefixes []string, indexes []int, maxNew int, stops []string, purpose string) ([]string, error) {
	reqs := make([]model.Request, len(users))
	for i, u := range users {
		ids, err := f.tk.ChatIDs(auxChat(f.prompts, u), tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: f.thinking})
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
	// Any special token ends the text (it would be stripped anyway), and
	// not before one real token: a weak model's most likely first token is
	// often one of them, which would leave every field empty.
	p := model.SamplingParams{Temperature: f.cfg.AuxTemperature, TopP: 1, MaxNewTokens: maxNew, MinNewTokens: 1, StopIDs: f.stopIDs,
		StopStrings: stops, Seed: drawKey(f.step, -1, purpose) ^ f.seed}
	opt := f.genOpt
	if len(stops) > 0 {
		opt.Detokenize = func() func(int64) string {
			s := f.tk.NewStream(true)
			return func(id int64) string { return s.Add(int(id)) }
		}
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = f.m.GenerateAt(reqs, indexes, p, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(users))
	for _, s := range res {
		f.tokens.generated += len(s.IDs)
		text := f.tk.Decode(tokenizer.Ints(s.IDs), true)
		for _, st := range stops {
			if i := strings.Index(text, st); i >= 0 {
				text = text[:i]
			}
		}
		out[s.Prompt] = strings.TrimSpace(text)
	}
	return out, nil
}

// auxChat is an auxiliary prompt's chat: the prompts' system message, if
// any, and the user message.
func auxChat(p pool.Prompts, user string) []tokenizer.Message {
	var msgs []tokenizer.Message
	if p.System != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: p.System})
	}
	return append(msgs, tokenizer.Message{Role: "user", Content: user})
}

// summarize writes the three-field summary of each attempt (at problem
// problems[i], outcome correct[i]) as structured output: the assistant turn
// is prefilled with each field's header in turn and each field is
// generated up to the next header (its stop string) or
// lanpo.summary_field_tokens, so even a weak model's summary parses; a
// field it leaves empty stays empty (counted by the caller).
func (f *feedback) summarize(problems, attempts []string, correct []bool, indexes []int) ([]pool.Summary, error) {
	users := make([]string, len(attempts))
	for i := range attempts {
		users[i] = f.prompts.SummarizeRequest(problems[i], f.modelText(attempts[i]), correct[i])
	}
	P := f.prompts
	headers := []string{P.FlowHeader, P.PrinciplesHeader, P.PitfallsHeader}
	fields := make([][]string, 3)
	prefix := make([]string, len(attempts))
	for k, h := range headers {
		for i := range prefix {
			if k > 0 {
				prefix[i] += "\n"
			}
			prefix[i] += h + " "
		}
		var stops []string // every other header ends the field
		for o, other := range headers {
			if o != k {
				stops = append(stops, other)
			}
		}
		var err error
		if fields[k], err = f.generate(users, prefix, indexes, f.cfg.SummaryFieldTokens, stops, "summary-"+h); err != nil {
			return nil, err
		}
		for i := range prefix {
			prefix[i] += fields[k][i]
		}
	}
	out := make([]pool.Summary, len(attempts))
	for i := range out {
		out[i] = pool.Summary{FlowOfThought: f.cleanField(fields[0][i]), Principles: f.cleanField(fields[1][i]), Pitfalls: f.cleanField(fields[2][i])}
	}
	return out, nil
}

func (f *feedback) cleanField(s string) string {
	s, n := f.tk.StripAddedTokens(s)
	f.met.SpecialRemoved += n
	return strings.TrimSpace(s)
}

// Feedback builds LANPO's feedback-aware prompts outside a training run,
// through the trainer's own code: lanpo eval's retrieval mode (abstraction
// from a checkpoint's pool) and self-correct mode (reflection on the
// model's own first attempt). Not safe for concurrent use; torch work runs
// on the caller's thread.
type Feedback struct {
	f *feedback
	t *phaseTimer
}

// NewFeedback prepares prompts for m with cfg's data.prompt_template,
// data.system_prompt, rollout.max_new_tokens and lanpo section; p may be
// nil when only reflection is wanted.
func NewFeedback(m *model.Model, tk *tokenizer.Tokenizer, cfg Config, p *pool.Pool) (*Feedback, error) {
	f, err := newFeedback(m, tk, cfg, p)
	if err != nil {
		return nil, err
	}
	return &Feedback{f: f, t: newPhaseTimer()}, nil
}

// Solve is a bare problem's prompt (ids, with the assistant header).
func (F *Feedback) Solve(problem string) ([]int64, error) {
	return solveIDs(F.f.tk, F.f.data, F.f.thinking, problem)
}

// Reflection is the problem's prompt with an earlier attempt to critique and
// redo, the training run's reflection prompt; ok is false when it does not
// fit the model's context.
func (F *Feedback) Reflection(problem, attempt string) (ids []int64, ok bool, err error) {
	return F.f.reflection(problem, pool.Attempt{Text: attempt})
}

// Abstraction is each problem's prompt with a plan condensed from related
// pool problems (retrieval, the γ filter and the condenser, as in
// training); nil where nothing passed γ or the prompt did not fit.
// indexes key the condenser's random streams.
func (F *Feedback) Abstraction(problems []string, indexes []int) ([][]int64, error) {
	if F.f.pool == nil {
		return nil, fmt.Errorf("abstraction needs a pool")
	}
	items := make([]abstractionItem, len(problems))
	for i, p := range problems {
		items[i] = abstractionItem{problem: p, index: indexes[i]}
	}
	res, err := F.f.abstraction(F.t, items)
	if err != nil {
		return nil, err
	}
	ids := make([][]int64, len(res))
	for i, r := range res {
		ids[i] = r.ids
	}
	return ids, nil
}

// Counters returns LANPO's counters (fallbacks, retrieval, truncation,
// tokens) since the last call and resets them.
func (F *Feedback) Counters() (m LANPOMetrics, prefilled, generated int) {
	m, prefilled, generated = F.f.met, F.f.tokens.prefilled, F.f.tokens.generated
	F.f.met, F.f.tokens.prefilled, F.f.tokens.generated = LANPOMetrics{}, 0, 0
	return m, prefilled, generated
}
