package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// idText is a decoder for tests: each id's text is "<id>".
func idText() func(int64) string { return func(id int64) string { return fmt.Sprintf("<%d>", id) } }

// segmentsOneByOne is a structured output's definition, greedy, as
// separate generate calls: each segment is a fresh call on the prompt,
// everything before it and its header (unless the previous segment ended
// on the header's text), ended by a stop id (dropped unless last), one of
// its stops, or its budget.
func segmentsOneByOne(t *testing.T, m *Model, prompt []int64, p SamplingParams) (ids []int64, ranges [][2]int) {
	t.Helper()
	skipHeader := false
	for k, g := range p.Segments {
		if !skipHeader {
			ids = append(ids, g.Header...)
		}
		q := SamplingParams{MaxNewTokens: g.MaxTokens, MinNewTokens: min(p.MinNewTokens, g.MaxTokens), StopIDs: p.StopIDs, StopStrings: g.Stops}
		out, err := m.Generate([]Request{{PromptIDs: append(slices.Clone(prompt), ids...)}}, q, GenerateOptions{Detokenize: idText})
		if err != nil {
			t.Fatal(err)
		}
		got := out[0].IDs
		last := k == len(p.Segments)-1
		if !last && len(got) > 0 && slices.Contains(p.StopIDs, got[len(got)-1]) {
			got = got[:len(got)-1]
		}
		ranges = append(ranges, [2]int{len(ids), len(ids) + len(got)})
		ids = append(ids, got...)
		skipHeader = false
		if !last && out[0].FinishReason == "stop" {
			var text strings.Builder
			for _, id := range got {
				text.WriteString(idText()(id))
			}
			for _, st := range g.Stops {
				if strings.Contains(text.String(), st) {
					skipHeader = st == p.Segments[k+1].HeaderText
					break
				}
			}
		}
		if out[0].FinishReason == "stop" && last {
			break
		}
	}
	return ids, ranges
}

// TestSegmentsEqualOneByOne: one decode through the segments, headers fed
// inside it, gives what separate calls give, for every request of a batch
// whose rows switch segments at different steps: budgets, stop ids (not
// fed between segments), stop strings, and a header the model wrote
// itself.
func TestSegmentsEqualOneByOne(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	segs := func(stops []string, headerText string) []Segment {
		return []Segment{
			{Header: []int64{7}, MaxTokens: 3, Stops: stops},
			{Header: []int64{11, 12}, HeaderText: headerText, MaxTokens: 4},
			{Header: []int64{13}, MaxTokens: 2},
		}
	}
	// Stops are picked from the unstopped outputs (request 0's, 1's).
	full, err := m.Generate(genPrompts, SamplingParams{Segments: segs(nil, "")}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := full[0].IDs, full[3].IDs // [7 s s s 11 12 s s s s 13 s s]
	span := idText()(a[1]) + idText()(a[2])
	cases := []struct {
		name string
		p    SamplingParams
	}{
		{"budgets", SamplingParams{Segments: segs(nil, "")}},
		{"stop id", SamplingParams{Segments: segs(nil, ""), StopIDs: []int64{a[2], b[7]}}},
		{"stop id after one token", SamplingParams{Segments: segs(nil, ""), StopIDs: []int64{a[1], a[6], a[7], b[1], 84, 73}, MinNewTokens: 1}}, // 84, 73: what this model samples once a[1] is held back
		{"stop string, header forced", SamplingParams{Segments: segs([]string{span}, "")}},
		{"stop string is the header", SamplingParams{Segments: segs([]string{span}, span)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := m.Generate(genPrompts, c.p, GenerateOptions{Detokenize: idText})
			if err != nil {
				t.Fatal(err)
			}
			short := false
			for _, smp := range out {
				want, ranges := segmentsOneByOne(t, m, genPrompts[smp.Prompt].PromptIDs, c.p)
				if fmt.Sprint(smp.IDs) != fmt.Sprint(want) || fmt.Sprint(smp.Segments) != fmt.Sprint(ranges) {
					t.Errorf("request %d sample %d:\none pass %v %v\none by one %v %v", smp.Prompt, smp.Index, smp.IDs, smp.Segments, want, ranges)
				}
				short = short || len(smp.IDs) < segmentsBudget(c.p.Segments)
			}
			if c.name != "budgets" && !short {
				t.Errorf("no sample ended a segment early: the case tests nothing (outputs %v)", out[0].IDs)
			}
		})
	}
}

// TestSegmentsLogprobs: every recorded log-prob, of sampled and of fed
// header ids alike, is the model's, and sampling a structured output does
// not depend on the batch.
func TestSegmentsLogprobs(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen2-gqa2-tied")
	p := SamplingParams{Temperature: 1, Seed: 5, StopIDs: []int64{3, 17}, MinNewTokens: 1, Segments: []Segment{
		{MaxTokens: 4}, {Header: []int64{11, 12}, MaxTokens: 5}, {Header: []int64{13, 2}, MaxTokens: 3}}}
	out, err := m.Generate(genPrompts, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gap := logprobGap(t, m, genPrompts, out, 1); gap > 1e-5 {
		t.Errorf("recorded log-probs differ from the trainer's by %g", gap)
	}
	alone, err := m.GenerateAt(genPrompts[2:], []int{2}, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(alone[0].IDs) != fmt.Sprint(out[len(out)-1].IDs) {
		t.Errorf("request 2 alone sampled %v, in the batch %v", alone[0].IDs, out[len(out)-1].IDs)
	}
}
