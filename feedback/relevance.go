package feedback

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// LANPO's relevance filter: the scorers whose score γ
// (lanpo.similarity_threshold) applies to. Calibrate them on your own model
// with lanpo bench relevance (calibrate.go); docs/lanpo.md has measured
// pass rates.

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

// scorerEnv is what the model-backed scorers use.
type scorerEnv struct {
	m          *model.Model
	tk         *tokenizer.Tokenizer
	prompts    pool.Prompts
	maxContext int   // each pair's texts are clipped to half of it
	thinking   *bool // rollout.enable_thinking, for the chat template
	prefilled  *int  // counts the tokens the scorer prefills
	// centre: the texts whose mean embedding the embedding scorer
	// subtracts (lanpo.embedding_centre fixed: centreProblems); nil: the
	// mean of the texts scored together (batch).
	centre []string
}

// scorerNamed returns the scorer lanpo.similarity names.
func scorerNamed(name string, env scorerEnv) (relevanceScorer, error) {
	switch name {
	case simBM25:
		return bm25Scorer{}, nil
	case simEmbedding:
		return embeddingScorer{env}, nil
	case simPolicy:
	default:
		return nil, fmt.Errorf("similarity %q: want %s, %s or %s", name, simPolicy, simBM25, simEmbedding)
	}
	ps := &policyScorer{env: env}
	for d := 0; d <= 9; d++ {
		id, ok := env.tk.TokenID(fmt.Sprint(d))
		if !ok {
			return nil, fmt.Errorf("policy needs the digit %d to be one token of the vocabulary; use bm25 or embedding", d)
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
	env    scorerEnv
	digits []int64
}

func (s *policyScorer) score(pairs []relevancePair) ([]float64, error) {
	e := s.env
	prompts := make([][]int64, len(pairs))
	half := e.maxContext / 2
	pre, err := e.tk.Encode(e.prompts.RatingPrefix, false)
	if err != nil {
		return nil, err
	}
	for i, p := range pairs {
		q, _ := clipText(e.tk, p.query, half)
		c, _ := clipText(e.tk, p.candidate, half)
		ids, err := e.tk.ChatIDs(AuxChat(e.prompts, e.prompts.RelevanceRequest(q, c)), tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: e.thinking})
		if err != nil {
			return nil, err
		}
		prompts[i] = tokenizer.Int64s(append(ids, pre...))
		*e.prefilled += len(prompts[i])
	}
	lps, err := e.m.NextTokenLogProbs(prompts, s.digits, 16)
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
// policy, recomputed at query time (the policy changes). Raw hidden states
// share a large common direction that makes every cosine high, so a mean
// is subtracted first: by default the mean over a fixed set of math
// problems (env.centre), which gives a raw score the same meaning in any
// run — "more alike than math problems in general" — whatever the data,
// the pool's mix or the texts scored together; with no such set, the mean
// over the call's own texts. Relevance is max(0, cosine).
type embeddingScorer struct{ env scorerEnv }

func (s embeddingScorer) score(pairs []relevancePair) ([]float64, error) {
	e := s.env
	index := map[string]int{}
	var seqs [][]int64
	add := func(text string) (int, error) {
		if i, ok := index[text]; ok {
			return i, nil
		}
		t, _ := clipText(e.tk, text, e.maxContext)
		ids, err := e.tk.Encode(t, false)
		if err != nil {
			return 0, err
		}
		if len(ids) == 0 {
			ids = []int{0}
		}
		index[text] = len(seqs)
		seqs = append(seqs, tokenizer.Int64s(ids))
		*e.prefilled += len(ids)
		return index[text], nil
	}
	for _, p := range pairs {
		if _, err := add(p.query); err != nil {
			return nil, err
		}
		if _, err := add(p.candidate); err != nil {
			return nil, err
		}
	}
	var centreAt []int
	for _, t := range e.centre {
		i, err := add(t)
		if err != nil {
			return nil, err
		}
		centreAt = append(centreAt, i)
	}
	embs, err := e.m.MeanHidden(seqs, 16)
	if err != nil {
		return nil, err
	}
	from := embs
	if len(centreAt) > 0 {
		from = make([][]float32, len(centreAt))
		for k, i := range centreAt {
			from[k] = embs[i]
		}
	}
	centred := centre(embs, meanOf(from))
	out := make([]float64, len(pairs))
	for i, p := range pairs {
		out[i] = math.Max(0, cosine(centred[index[p.query]], centred[index[p.candidate]]))
	}
	return out, nil
}

//go:embed relevance_centre.jsonl
var centreJSONL string

// centreProblems are the fixed math problems the embedding scorer centres
// on (lanpo.embedding_centre: fixed): eight short MATH-train problems per
// subject, written by scripts/data/relevance_centre.py.
var centreProblems = sync.OnceValue(func() []string {
	var out []string
	err := jsonl.Lines(strings.NewReader(centreJSONL), "feedback/relevance_centre.jsonl", func(n int, line []byte) error {
		var r struct{ Problem string }
		if err := json.Unmarshal(line, &r); err != nil || r.Problem == "" {
			return fmt.Errorf("feedback/relevance_centre.jsonl line %d: not a problem record (%v)", n, err)
		}
		out = append(out, r.Problem)
		return nil
	})
	if err != nil {
		panic(err) // embedded at build time: a broken file is a build defect
	}
	return out
})

// centreTexts are the texts the embedding scorer centres on for a
// lanpo.embedding_centre value ("": fixed); nil (batch): the texts scored
// together.
func centreTexts(name string) ([]string, error) {
	switch name {
	case centreFixed, "":
		return centreProblems(), nil
	case centreBatch:
		return nil, nil
	}
	return nil, fmt.Errorf("%q: want %s or %s", name, centreFixed, centreBatch)
}

// meanOf is the mean vector (float64).
func meanOf(vs [][]float32) []float64 {
	if len(vs) == 0 {
		return nil
	}
	mean := make([]float64, len(vs[0]))
	for _, v := range vs {
		for j, x := range v {
			mean[j] += float64(x) / float64(len(vs))
		}
	}
	return mean
}

// centre subtracts mean from each vector (float64).
func centre(vs [][]float32, mean []float64) [][]float64 {
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
