package eval

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/lanpo-rl/lanpo/internal/stats"
)

// Summary is one benchmark in one mode: a row of the table.
type Summary struct {
	Bench string `json:"bench"`
	Mode  string `json:"mode"`
	N     int    `json:"problems"`
	K     int    `json:"k"`
	// mean@k: accuracy averaged over the k samples of every problem (the
	// paper's mean@32). In self-correct it is after reflection.
	MeanAtK float64  `json:"mean_at_k"`
	PassAtK []KValue `json:"pass_at_k"` // unbiased, for k = 1, 2, 4, …
	MajAtK  float64  `json:"maj_at_k"`  // majority vote over extracted answers (0 for code: no answer to vote on)
	// Code: a code benchmark (programs run against tests): maj@k has no
	// meaning there, and the table and metrics leave it out.
	Code bool `json:"code,omitempty"`
	// Responses: mean length in tokens, share cut off by the token limit.
	ResponseTokens float64 `json:"response_tokens_mean"`
	Truncated      float64 `json:"truncation_rate"`
	// Self-correct: accuracy of the first attempts, after reflection, and
	// how verdicts moved between them.
	FirstAttempt    float64 `json:"first_attempt_accuracy,omitempty"`
	AfterReflection float64 `json:"after_reflection_accuracy,omitempty"`
	WrongToRight    int     `json:"wrong_to_right,omitempty"`
	RightToWrong    int     `json:"right_to_wrong,omitempty"`
	// Retrieval: problems whose prompt carried a plan, and contamination:
	// problems with a near-duplicate in the pool and their mean similarity
	// to their nearest pool problem.
	WithContext    int     `json:"with_context,omitempty"`
	NearDuplicates int     `json:"near_duplicates_in_pool,omitempty"`
	NearestMean    float64 `json:"nearest_pool_similarity_mean,omitempty"`
	// Decontaminated: the benchmark's problems dropped before the
	// evaluation for a twin in the training files (not counted in N).
	Decontaminated int `json:"decontaminated,omitempty"`
	// SkippedLong: problems left out because their prompt did not fit the
	// model's context with the generation budget (--skip-long-prompts;
	// not counted in N).
	SkippedLong int `json:"skipped_long_prompts,omitempty"`
	// Zero-shot, problems with a reference solution: its token-mean
	// negative log-likelihood under the bare prompt over them, and inside
	// the reference span where one is marked (Options.ReferenceSpan).
	ReferenceNLL     float64 `json:"reference_nll,omitempty"`
	ReferenceNLLSpan float64 `json:"reference_nll_span,omitempty"`
	// Tools mode: calls and tool turns per sample, the failed calls, and,
	// beside a zero-shot run of the same problems (drawn with the same
	// randomness), the paired difference of per-problem accuracy (tools −
	// zero-shot) with its 95% interval (normal approximation over
	// problems).
	ToolCallsMean  float64     `json:"tool_calls_mean,omitempty"`
	ToolTurnsMean  float64     `json:"tool_turns_mean,omitempty"`
	ToolErrors     int         `json:"tool_errors,omitempty"`
	ToolsMinusZero *float64    `json:"tools_minus_zero_shot,omitempty"`
	ToolsCI95      *[2]float64 `json:"tools_minus_zero_shot_ci95,omitempty"`
}

// KValue is one pass@k.
type KValue struct {
	K     int     `json:"k"`
	Value float64 `json:"value"`
}

// Contamination is what the summary reports of benchmark problems seen in
// training: the pool.Similarity at which a pool problem counts as the
// benchmark problem itself, and the problems Decontaminate dropped.
type Contamination struct {
	NearDuplicate float64
	Dropped       []Contaminated
}

// Summarize computes the table from sample lines (so a resumed run's
// summary equals an uninterrupted one's), in benchmark then mode order.
func Summarize(lines []SampleLine, k int, benches []Benchmark, modes []string, cont Contamination) []Summary {
	type key struct{ bench, mode, problem string }
	byProblem := map[key][]SampleLine{}
	for _, l := range lines {
		kk := key{l.Bench, l.Mode, l.ProblemID}
		byProblem[kk] = append(byProblem[kk], l)
	}
	var out []Summary
	for _, b := range benches {
		for _, mode := range modes {
			s := Summary{Bench: b.Name, Mode: mode, K: k, SkippedLong: b.SkippedLong, Code: b.Code}
			for _, d := range cont.Dropped {
				if d.Bench == b.Name {
					s.Decontaminated++
				}
			}
			pass := make([]float64, len(powersOfTwo(k)))
			var tokens, trunc, count float64
			var refNLL, refTokens, spanNLL, spanTokens float64
			for _, p := range b.Problems {
				ls := byProblem[key{b.Name, mode, p.ID}]
				if len(ls) == 0 {
					continue
				}
				s.N++
				final := ls
				if mode == ModeSelfCorrect {
					first, redo := stage(ls, "first"), stage(ls, "reflect")
					for j := range first {
						if first[j].Correct {
							s.FirstAttempt++
						}
						if j < len(redo) {
							switch {
							case !first[j].Correct && redo[j].Correct:
								s.WrongToRight++
							case first[j].Correct && !redo[j].Correct:
								s.RightToWrong++
							}
						}
					}
					final = redo
				}
				c := 0
				var votes []vote
				for _, l := range final {
					if l.Correct {
						c++
					}
					votes = append(votes, vote{l.Extracted, l.Correct})
				}
				for _, l := range ls {
					s.ToolCallsMean += float64(l.ToolCalls)
					s.ToolTurnsMean += float64(l.ToolTurns)
					s.ToolErrors += l.ToolErrors
					refNLL, refTokens = refNLL-l.RefLogp, refTokens+float64(l.RefTokens)
					spanNLL, spanTokens = spanNLL-l.RefSpanLogp, spanTokens+float64(l.RefSpanTokens)
					tokens += float64(l.Tokens)
					if l.Truncated {
						trunc++
					}
					count++
				}
				s.MeanAtK += float64(c) / float64(len(final))
				for i, kk := range powersOfTwo(len(final)) {
					if i < len(pass) {
						pass[i] += PassAtK(len(final), c, kk)
					}
				}
				if !b.Code && majorityCorrect(votes) {
					s.MajAtK++
				}
				if mode == ModeRetrieval {
					if ls[0].Context {
						s.WithContext++
					}
					s.NearestMean += ls[0].NearSim
					if ls[0].NearSim >= cont.NearDuplicate {
						s.NearDuplicates++
					}
				}
			}
			if s.N == 0 {
				continue
			}
			n := float64(s.N)
			s.MeanAtK /= n
			s.MajAtK /= n
			for i, kk := range powersOfTwo(k) {
				s.PassAtK = append(s.PassAtK, KValue{kk, pass[i] / n})
			}
			s.ResponseTokens, s.Truncated = tokens/count, trunc/count
			s.ToolCallsMean, s.ToolTurnsMean = s.ToolCallsMean/count, s.ToolTurnsMean/count
			if mode == ModeTools {
				s.ToolsMinusZero, s.ToolsCI95 = pairedDiff(b, func(p, m string) []SampleLine { return byProblem[key{b.Name, m, p}] })
			}
			if mode == ModeSelfCorrect {
				s.FirstAttempt /= n * float64(k)
				s.AfterReflection = s.MeanAtK
			}
			if mode == ModeRetrieval {
				s.NearestMean /= n
			}
			if refTokens > 0 {
				s.ReferenceNLL = refNLL / refTokens
			}
			if spanTokens > 0 {
				s.ReferenceNLLSpan = spanNLL / spanTokens
			}
			out = append(out, s)
		}
	}
	return out
}

// pairedDiff is the mean over problems run in both the tools and the
// zero-shot mode of (accuracy with tools − without), and its 95% interval
// (mean ± 1.96 · sd / √n); nil when no problem ran in both.
func pairedDiff(b Benchmark, lines func(problem, mode string) []SampleLine) (*float64, *[2]float64) {
	acc := func(ls []SampleLine) float64 {
		c := 0
		for _, l := range ls {
			if l.Correct {
				c++
			}
		}
		return float64(c) / float64(len(ls))
	}
	var d []float64
	for _, p := range b.Problems {
		with, without := lines(p.ID, ModeTools), lines(p.ID, ModeZeroShot)
		if len(with) > 0 && len(without) > 0 {
			d = append(d, acc(with)-acc(without))
		}
	}
	if len(d) == 0 {
		return nil, nil
	}
	mean := stats.Mean(d)
	if len(d) < 2 {
		return &mean, nil // no spread to estimate
	}
	half := 1.96 * stats.StdDev(d) / math.Sqrt(float64(len(d)))
	return &mean, &[2]float64{mean - half, mean + half}
}

func stage(ls []SampleLine, name string) []SampleLine {
	var out []SampleLine
	for _, l := range ls {
		if l.Stage == name {
			out = append(out, l)
		}
	}
	return out
}

// PrintTable writes the summary as a text table.
func PrintTable(w io.Writer, sums []Summary) {
	if len(sums) == 0 {
		return
	}
	k := sums[0].K
	head := []string{"bench", "mode", "n", "k", "mean@k"}
	for _, kv := range sums[0].PassAtK {
		head = append(head, fmt.Sprintf("pass@%d", kv.K))
	}
	head = append(head, "maj@k", "tokens", "trunc", "notes")
	rows := [][]string{head}
	for _, s := range sums {
		row := []string{s.Bench, s.Mode, fmt.Sprint(s.N), fmt.Sprint(k), fmt.Sprintf("%.3f", s.MeanAtK)}
		for _, kv := range s.PassAtK {
			row = append(row, fmt.Sprintf("%.3f", kv.Value))
		}
		notes := ""
		switch s.Mode {
		case ModeSelfCorrect:
			notes = fmt.Sprintf("first %.3f → after reflection %.3f (wrong→right %d, right→wrong %d)", s.FirstAttempt, s.AfterReflection, s.WrongToRight, s.RightToWrong)
		case ModeRetrieval:
			notes = fmt.Sprintf("plan for %d/%d; near-duplicates in pool %d", s.WithContext, s.N, s.NearDuplicates)
		case ModeTools:
			notes = fmt.Sprintf("%.2f calls, %.2f tool turns a sample; %d failed calls", s.ToolCallsMean, s.ToolTurnsMean, s.ToolErrors)
			if d, ci := s.ToolsMinusZero, s.ToolsCI95; d != nil && ci != nil {
				notes += fmt.Sprintf("; vs zero-shot %+.3f [%+.3f, %+.3f] (paired, 95%%)", *d, ci[0], ci[1])
			}
		}
		if s.Decontaminated > 0 {
			notes = strings.TrimPrefix(notes+fmt.Sprintf("; %d dropped as contaminated", s.Decontaminated), "; ")
		}
		if s.SkippedLong > 0 {
			notes = strings.TrimPrefix(notes+fmt.Sprintf("; %d skipped: prompt longer than the context allows", s.SkippedLong), "; ")
		}
		maj := fmt.Sprintf("%.3f", s.MajAtK)
		if s.Code {
			maj = "—"
		}
		row = append(row, maj, fmt.Sprintf("%.0f", s.ResponseTokens), fmt.Sprintf("%.3f", s.Truncated), notes)
		rows = append(rows, row)
	}
	width := make([]int, len(head))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// Flatten names a summary's numbers BENCH/MODE/METRIC (mean@k, pass@K,
// maj@k; for self-correct first_attempt; for tools tool_calls_mean,
// tool_turns_mean, tool_errors and tools_minus_zero_shot), as
// metrics.jsonl and reports use them.
func Flatten(sums []Summary) map[string]float64 {
	out := map[string]float64{}
	for _, s := range sums {
		pre := s.Bench + "/" + s.Mode + "/"
		out[pre+"mean@k"] = s.MeanAtK
		if !s.Code {
			out[pre+"maj@k"] = s.MajAtK
		}
		for _, kv := range s.PassAtK {
			out[fmt.Sprintf("%spass@%d", pre, kv.K)] = kv.Value
		}
		if s.Mode == ModeSelfCorrect {
			out[pre+"first_attempt"] = s.FirstAttempt
		}
		if s.ReferenceNLL > 0 {
			out[pre+"reference_nll"] = s.ReferenceNLL
		}
		if s.ReferenceNLLSpan > 0 {
			out[pre+"reference_nll_span"] = s.ReferenceNLLSpan
		}
		if s.Mode == ModeTools {
			out[pre+"tool_calls_mean"] = s.ToolCallsMean
			out[pre+"tool_turns_mean"] = s.ToolTurnsMean
			out[pre+"tool_errors"] = float64(s.ToolErrors)
			if s.ToolsMinusZero != nil {
				out[pre+"tools_minus_zero_shot"] = *s.ToolsMinusZero
			}
		}
	}
	return out
}
