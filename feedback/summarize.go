package feedback

import (
	"fmt"
	"strings"
	"time"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// summarize writes the summary of each attempt (at problem problems[i],
// outcome correct[i]) as structured output, in one decode per attempt:
// the assistant turn starts with the first field's header, and each later
// header is fed inside the decode when the field before it ends — at
// another field's header (its stop strings), a special token, or
// lanpo.summary_field_tokens — so even a weak model's summary parses and
// the attempt is prefilled once, not once per field. The fields are the
// lessons (principles, pitfalls), after the flow of thought when the
// prompts ask for it (pool.Prompts.FlowHeader). A field the model leaves
// empty stays empty (counted by the caller).
func (f *Builder) summarize(problems, attempts []string, correct []bool, indexes []int) ([]pool.Summary, error) {
	users := f.summaryRequests(problems, attempts, correct)
	headers := f.prompts.SummaryHeaders()
	prefixes := make([]string, len(attempts))
	for i := range prefixes {
		prefixes[i] = headers[0]
	}
	segs := make([]model.Segment, len(headers))
	for k, h := range headers {
		segs[k] = model.Segment{MaxTokens: f.cfg.SummaryFieldTokens, Stops: others(headers, k)}
		if k > 0 {
			ids, err := f.tk.Encode("\n"+h, false)
			if err != nil {
				return nil, err
			}
			segs[k].Header, segs[k].HeaderText = tokenizer.Int64s(ids), h
		}
	}
	res, err := f.sample(users, prefixes, indexes, model.SamplingParams{Segments: segs}, "summary")
	if err != nil {
		return nil, err
	}
	out := make([]pool.Summary, len(attempts))
	for _, s := range res {
		fields := make([]string, len(s.Segments))
		for k, r := range s.Segments {
			fields[k] = cutAtStops(f.tk.Decode(tokenizer.Ints(s.IDs[r[0]:r[1]]), true), segs[k].Stops)
		}
		out[s.Prompt] = f.summaryOf(fields, headers)
	}
	return out, nil
}

// summaryRequests are the summarization prompts' user messages.
func (f *Builder) summaryRequests(problems, attempts []string, correct []bool) []string {
	users := make([]string, len(attempts))
	for i := range attempts {
		users[i] = f.prompts.SummarizeRequest(problems[i], f.modelText(attempts[i]), correct[i])
	}
	return users
}

// summaryOf is the summary whose fields, in the order of headers, the
// model wrote (each cleaned; fields not reached stay empty).
func (f *Builder) summaryOf(fields, headers []string) pool.Summary {
	var fl [3]string // flow, principles, pitfalls
	for k, text := range fields {
		fl[3-len(headers)+k] = f.cleanField(text, headers, k)
	}
	return pool.Summary{FlowOfThought: fl[0], Principles: fl[1], Pitfalls: fl[2]}
}

// others is headers without its k-th.
func others(headers []string, k int) []string {
	var o []string
	for i, h := range headers {
		if i != k {
			o = append(o, h)
		}
	}
	return o
}

// cleanField removes added-token strings from the k-th summary field and
// ends it where the model began another field in its own words, or began
// this one again (its own header, exactly, after some text: a real run's
// principles ran on into "Principles: 3. …").
func (f *Builder) cleanField(s string, headers []string, k int) string {
	s, n := f.tk.StripAddedTokens(s)
	f.met.SpecialRemoved += n
	whole := strings.TrimSpace(s)
	if i := strings.Index(s, headers[k]); i > 0 && strings.TrimSpace(s[:i]) != "" {
		s = s[:i]
	}
	cut := pool.CutAtHeader(s, others(headers, k)...)
	if cut != whole {
		f.met.SummaryFieldsCut++
	}
	return cut
}

// summarizeByField is the summary written field by field, one generation
// per field, each prefilling the prompt and the fields before it again:
// how lanpo wrote summaries before the one-pass decode. It is kept as the
// baseline of lanpo bench summaries and as the definition the one-pass
// summary is tested against.
func (f *Builder) summarizeByField(problems, attempts []string, correct []bool, indexes []int) ([]pool.Summary, error) {
	users := f.summaryRequests(problems, attempts, correct)
	prefixes := make([]string, len(attempts))
	headers := f.prompts.SummaryHeaders()
	fields := make([][]string, len(headers))
	for k, h := range headers {
		for i := range prefixes {
			if k > 0 {
				prefixes[i] += "\n"
			}
			prefixes[i] += h
		}
		var err error
		if fields[k], err = f.generate(users, prefixes, indexes, f.cfg.SummaryFieldTokens, others(headers, k), "summary-"+h); err != nil {
			return nil, err
		}
		for i := range prefixes {
			prefixes[i] += " " + fields[k][i]
		}
	}
	out := make([]pool.Summary, len(attempts))
	for i := range out {
		mine := make([]string, len(headers))
		for k := range headers {
			mine[k] = fields[k][i]
		}
		out[i] = f.summaryOf(mine, headers)
	}
	return out, nil
}

// SummaryBench is one way of writing summaries, timed.
type SummaryBench struct {
	Seconds              float64
	Prefilled, Generated int
	Summaries            []pool.Summary
}

// BenchSummariesFromPool runs BenchSummaries on the first n entries of
// the pool file (attempts, outcomes and their problems' texts), on the
// caller's locked thread.
func BenchSummariesFromPool(m *model.Model, tk *tokenizer.Tokenizer, s Settings, poolPath string, n int) (byField, onePass SummaryBench, err error) {
	p, err := pool.Load(poolPath, s.LANPO.PoolConfig())
	if err != nil {
		return byField, onePass, err
	}
	var problems, attempts []string
	var correct []bool
	for i := 0; i < p.Problems() && len(attempts) < n; i++ {
		id, text := p.ProblemAt(i)
		for _, e := range p.EntriesOf(id) {
			if len(attempts) < n {
				problems, attempts, correct = append(problems, text), append(attempts, e.Attempt), append(correct, e.Correct)
			}
		}
	}
	if len(attempts) == 0 {
		return byField, onePass, fmt.Errorf("%s: no entries", poolPath)
	}
	return BenchSummaries(m, tk, s, problems, attempts, correct)
}

// BenchSummaries writes the summaries of the given attempts twice with
// s's lanpo section: field by field (the baseline, first) and in one
// decode (what training does), on the caller's thread.
func BenchSummaries(m *model.Model, tk *tokenizer.Tokenizer, s Settings, problems, attempts []string, correct []bool) (byField, onePass SummaryBench, err error) {
	f, err := NewBuilder(m, tk, s, nil)
	if err != nil {
		return byField, onePass, err
	}
	indexes := make([]int, len(attempts))
	for i := range indexes {
		indexes[i] = i
	}
	run := func(write func([]string, []string, []bool, []int) ([]pool.Summary, error)) (b SummaryBench, err error) {
		f.tokens.prefilled, f.tokens.generated = 0, 0
		start := time.Now()
		b.Summaries, err = write(problems, attempts, correct, indexes)
		if err == nil {
			err = csrc.Synchronize()
		}
		b.Seconds, b.Prefilled, b.Generated = time.Since(start).Seconds(), f.tokens.prefilled, f.tokens.generated
		return b, err
	}
	if byField, err = run(f.summarizeByField); err != nil {
		return byField, onePass, err
	}
	onePass, err = run(f.summarize)
	return byField, onePass, err
}
