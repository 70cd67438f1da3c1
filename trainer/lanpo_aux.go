package trainer

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// The model-backed helpers LANPO's phases use: seeded draws, auxiliary
// generation (plans, structured summaries), clipping model text, and the
// relevance scorers. None of them touches the pool.

// drawKey keys a random stream by (step, prompt index, purpose): LANPO's
// draws never depend on what else ran, so resume and, later, data
// parallelism (where each rank sees a share of the prompts) reproduce them.
func drawKey(step, index int, purpose string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(purpose))
	return stepSeed(h.Sum64()^uint64(index)<<20, step)
}

// draw is a uniform number in [0, 1) from (run seed, step, prompt index,
// purpose).
func (l *lanpoRun) draw(index int, purpose string) float64 {
	return rand.New(rand.NewPCG(l.g.cfg.Seed, drawKey(l.g.state.Step, index, purpose))).Float64()
}

// tokens is the length of text in tokens.
func (l *lanpoRun) tokens(text string) int {
	ids, err := l.g.tk.Encode(text, false)
	if err != nil {
		return len(text) // not valid UTF-8: count bytes, still a bound
	}
	return len(ids)
}

// clip cuts text to at most n tokens, keeping its beginning and its end
// around a marker (an attempt's setup and its final answer both matter),
// and reports whether it cut.
func (l *lanpoRun) clip(text string, n int) (string, bool) {
	ids, err := l.g.tk.Encode(text, false)
	if err != nil || len(ids) <= n {
		return text, false
	}
	const marker = "\n[…]\n"
	head := (n - 4) / 2
	tail := n - 4 - head
	return l.g.tk.Decode(ids[:head], false) + marker + l.g.tk.Decode(ids[len(ids)-tail:], false), true
}

// generate completes, for each user message, an assistant turn that starts
// with the given prefix (the prefix is not returned), with no grad, at
// lanpo.aux_temperature (0: greedy), for at most maxNew tokens, and cuts
// each text before the first stop string. indexes key each item's random
// stream (with the step and purpose).
func (l *lanpoRun) generate(users, prefixes []string, indexes []int, maxNew int, stops []string, purpose string) ([]string, error) {
	g := l.g
	reqs := make([]model.Request, len(users))
	for i, u := range users {
		ids, err := g.tk.ChatIDs([]tokenizer.Message{{Role: "user", Content: u}}, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: g.cfg.Rollout.EnableThinking})
		if err != nil {
			return nil, err
		}
		pre, err := g.tk.Encode(prefixes[i], false)
		if err != nil {
			return nil, err
		}
		reqs[i] = model.Request{PromptIDs: tokenizer.Int64s(append(ids, pre...)), Samples: 1}
		g.stepTokens.prefilled += len(ids) + len(pre)
	}
	// Any special token ends the text (it would be stripped anyway), and
	// not before one real token: a weak model's most likely first token is
	// often one of them, which would leave every field empty.
	p := model.SamplingParams{Temperature: l.cfg.AuxTemperature, TopP: 1, MaxNewTokens: maxNew, MinNewTokens: 1, StopIDs: l.stopIDs, StopStrings: stops,
		Seed: drawKey(g.state.Step, -1, purpose) ^ g.cfg.Seed}
	opt := model.GenerateOptions{}
	if len(stops) > 0 {
		opt.Detokenize = func() func(int64) string {
			s := g.tk.NewStream(true)
			return func(id int64) string { return s.Add(int(id)) }
		}
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = g.m.GenerateAt(reqs, indexes, p, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(users))
	for _, s := range res {
		g.stepTokens.generated += len(s.IDs)
		text := g.tk.Decode(tokenizer.Ints(s.IDs), true)
		for _, st := range stops {
			if i := strings.Index(text, st); i >= 0 {
				text = text[:i]
			}
		}
		out[s.Prompt] = strings.TrimSpace(text)
	}
	return out, nil
}

// summarize writes the three-field summary of each rollout as structured
// output: the assistant turn is prefilled with each field's header in turn
// and each field is generated up to the next header (its stop string) or
// lanpo.summary_field_tokens, so even a weak model's summary parses; a
// field it leaves empty stays empty (counted).
func (l *lanpoRun) summarize(rolls []*rollout) ([]pool.Summary, error) {
	users := make([]string, len(rolls))
	indexes := make([]int, len(rolls))
	for i, r := range rolls {
		pr := l.g.problems[r.problem]
		users[i] = l.prompts.SummarizeRequest(pr.Problem, l.modelText(r.text), r.correct)
		indexes[i] = r.prompt.index*l.g.cfg.Rollout.SamplesPerPrompt + r.sample
	}
	P := l.prompts
	headers := []string{P.FlowHeader, P.PrinciplesHeader, P.PitfallsHeader}
	fields := make([][]string, 3)
	prefix := make([]string, len(rolls))
	for f, h := range headers {
		for i := range prefix {
			if f > 0 {
				prefix[i] += "\n"
			}
			prefix[i] += h + " "
		}
		var stops []string // every other header ends the field
		for o, other := range headers {
			if o != f {
				stops = append(stops, other)
			}
		}
		var err error
		if fields[f], err = l.generate(users, prefix, indexes, l.cfg.SummaryFieldTokens, stops, "summary-"+h); err != nil {
			return nil, err
		}
		for i := range prefix {
			prefix[i] += fields[f][i]
		}
	}
	out := make([]pool.Summary, len(rolls))
	for i := range out {
		out[i] = pool.Summary{FlowOfThought: l.cleanField(fields[0][i]), Principles: l.cleanField(fields[1][i]), Pitfalls: l.cleanField(fields[2][i])}
	}
	return out, nil
}

func (l *lanpoRun) cleanField(s string) string {
	s, n := l.g.tk.StripAddedTokens(s)
	l.met.SpecialRemoved += n
	return strings.TrimSpace(s)
}

// relevancePair is one (query problem, candidate problem) to score.
type relevancePair struct {
	query, candidate string
	bm25             float64 // normalized BM25, from retrieval
}

// relevanceScorer rates pairs in [0, 1]; γ (lanpo.similarity_threshold)
// applies to its scores.
type relevanceScorer interface {
	score(pairs []relevancePair) ([]float64, error)
}

func newScorer(l *lanpoRun) (relevanceScorer, error) {
	switch l.cfg.Similarity {
	case simBM25:
		return bm25Scorer{}, nil
	case simEmbedding:
		return embeddingScorer{l}, nil
	}
	ps := &policyScorer{l: l}
	for d := 0; d <= 9; d++ {
		id, ok := l.g.tk.TokenID(fmt.Sprint(d))
		if !ok {
			return nil, fmt.Errorf("config key lanpo.similarity: policy needs the digit %d to be one token of the vocabulary; use bm25 or embedding", d)
		}
		ps.digits = append(ps.digits, int64(id))
	}
	return ps, nil
}

// bm25Scorer is normalized BM25 (the cheap mode): the candidate's score
// over the query's score against itself.
type bm25Scorer struct{}

func (bm25Scorer) score(pairs []relevancePair) ([]float64, error) {
	out := make([]float64, len(pairs))
	for i, p := range pairs {
		out[i] = p.bm25
	}
	return out, nil
}

// policyScorer asks the policy itself to rate each pair 0-9 and reads the
// answer from its next-token probabilities over the ten digit tokens in one
// batched scoring pass (no generation): relevance = E[digit]/9 with the
// probabilities renormalized over the digits. γ = 0.9 then means an
// expected rating of at least 8.1 — the policy is confident the same ideas
// apply.
type policyScorer struct {
	l      *lanpoRun
	digits []int64
}

func (s *policyScorer) score(pairs []relevancePair) ([]float64, error) {
	l := s.l
	prompts := make([][]int64, len(pairs))
	half := l.cfg.MaxContextTokens / 2
	for i, p := range pairs {
		q, _ := l.clip(p.query, half)
		c, _ := l.clip(p.candidate, half)
		ids, err := l.g.tk.ChatIDs([]tokenizer.Message{{Role: "user", Content: l.prompts.RelevanceRequest(q, c)}}, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: l.g.cfg.Rollout.EnableThinking})
		if err != nil {
			return nil, err
		}
		pre, err := l.g.tk.Encode(l.prompts.RatingPrefix, false)
		if err != nil {
			return nil, err
		}
		prompts[i] = tokenizer.Int64s(append(ids, pre...))
		l.g.stepTokens.prefilled += len(prompts[i])
	}
	lps, err := l.g.m.NextTokenLogProbs(prompts, s.digits, 16)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(pairs))
	for i, lp := range lps {
		out[i] = expectedDigit(lp) / 9
	}
	return out, nil
}

// expectedDigit is Σ d·p(d) with p the softmax of the digits' log-probs.
func expectedDigit(lp []float64) float64 {
	top := math.Inf(-1)
	for _, v := range lp {
		top = math.Max(top, v)
	}
	var z, e float64
	for d, v := range lp {
		w := math.Exp(v - top)
		z += w
		e += float64(d) * w
	}
	return e / z
}

// embeddingScorer is the cosine of centred mean-pooled hidden states of the
// policy, recomputed at query time (the policy changes): every text of the
// call is embedded, the mean over them is subtracted (raw hidden states
// share a large common direction that makes every cosine high), and
// relevance is max(0, cosine).
type embeddingScorer struct{ l *lanpoRun }

func (s embeddingScorer) score(pairs []relevancePair) ([]float64, error) {
	l := s.l
	index := map[string]int{}
	var seqs [][]int64
	add := func(text string) error {
		if _, ok := index[text]; ok {
			return nil
		}
		t, _ := l.clip(text, l.cfg.MaxContextTokens)
		ids, err := l.g.tk.Encode(t, false)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			ids = []int{0}
		}
		index[text] = len(seqs)
		seqs = append(seqs, tokenizer.Int64s(ids))
		l.g.stepTokens.prefilled += len(ids)
		return nil
	}
	for _, p := range pairs {
		if err := add(p.query); err != nil {
			return nil, err
		}
		if err := add(p.candidate); err != nil {
			return nil, err
		}
	}
	embs, err := l.g.m.MeanHidden(seqs, 16)
	if err != nil {
		return nil, err
	}
	centred := centre(embs)
	out := make([]float64, len(pairs))
	for i, p := range pairs {
		out[i] = math.Max(0, cosine(centred[index[p.query]], centred[index[p.candidate]]))
	}
	return out, nil
}

// centre subtracts the mean vector from each vector (float64).
func centre(vs [][]float32) [][]float64 {
	if len(vs) == 0 {
		return nil
	}
	mean := make([]float64, len(vs[0]))
	for _, v := range vs {
		for j, x := range v {
			mean[j] += float64(x) / float64(len(vs))
		}
	}
	out := make([][]float64, len(vs))
	for i, v := range vs {
		out[i] = make([]float64, len(v))
		for j, x := range v {
			out[i][j] = float64(x) - mean[j]
		}
	}
	return out
}

func cosine(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
