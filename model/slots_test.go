package model

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// tinyModel64 is a tiny test model in fp64: sampling decisions then do not
// depend on the low bits that batch shapes move.
func tinyModel64(t *testing.T, name string) *Model { return tinyModelAs(t, name, gotch.Double) }

// slotPrompts: groups of different sizes (one larger than the slots in the
// tests), prompts of different lengths (one of a single token).
var slotPrompts = []Request{
	{PromptIDs: []int64{5, 9, 2, 7, 1, 3}, Samples: 3},
	{PromptIDs: []int64{4}, Samples: 2},
	{PromptIDs: []int64{8, 8, 6}, Samples: 1},
	{PromptIDs: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Samples: 4},
	{PromptIDs: []int64{12, 3}, Samples: 2},
}

func sampleKey(out []Sample) string {
	var k []string
	for _, s := range out {
		k = append(k, fmt.Sprint(s.Prompt, s.Index, s.IDs, s.FinishReason, s.Appended))
	}
	return strings.Join(k, "\n")
}

func maxLogprobDiff(t *testing.T, a, b []Sample) float64 {
	t.Helper()
	worst := 0.0
	for i := range a {
		for j := range min(len(a[i].Logprobs), len(b[i].Logprobs)) {
			x, y := float64(a[i].Logprobs[j]), float64(b[i].Logprobs[j])
			if math.IsNaN(x) != math.IsNaN(y) {
				t.Fatalf("sample %d token %d: log-prob %g against %g", i, j, x, y)
			}
			if !math.IsNaN(x) {
				worst = max(worst, math.Abs(x-y))
			}
		}
	}
	return worst
}

// TestSlotsSampleWhatOneBatchSamples: in fp64, the slots engine at any
// number of slots (fewer than a group, a group, more) gives the tokens of
// one batch for the same seeds, with stops that end rows at different
// steps, with and without prefix sharing, at different look intervals, and
// with top-k / top-p; the log-probabilities agree to fp32 rounding.
func TestSlotsSampleWhatOneBatchSamples(t *testing.T) {
	lockThread(t)
	m := tinyModel64(t, "qwen3-gqa3")
	cases := []SamplingParams{
		{Temperature: 1, MaxNewTokens: 12, Seed: 7, StopIDs: []int64{3, 17, 40}},
		{Temperature: 0.7, TopK: 20, TopP: 0.9, MaxNewTokens: 9, Seed: 3, StopIDs: []int64{5, 11}},
		{MaxNewTokens: 7, StopIDs: []int64{9}},
		{Temperature: 1, MaxNewTokens: 10, Seed: 5, StopIDs: []int64{3, 17}, MinNewTokens: 3},
		{Temperature: 1, MaxNewTokens: 10, Seed: 6, StopStrings: []string{"<17>", "<40><"}},
		{Temperature: 1, Seed: 5, StopIDs: []int64{3, 17}, MinNewTokens: 1, Segments: []Segment{
			{MaxTokens: 4, Stops: []string{"<9>"}}, {Header: []int64{11, 12}, MaxTokens: 5}, {Header: []int64{13, 2}, MaxTokens: 3}}},
	}
	for ci, p := range cases {
		whole, err := m.Generate(slotPrompts, p, GenerateOptions{Detokenize: idText})
		if err != nil {
			t.Fatal(err)
		}
		ends := map[int]bool{}
		for _, s := range whole {
			ends[len(s.IDs)] = true
		}
		if ci == 0 && len(ends) < 3 {
			t.Fatalf("case %d: samples end at %d different lengths: the test shows little", ci, len(ends))
		}
		for _, slots := range []int{1, 2, 3, 5, 8} {
			for _, o := range []GenerateOptions{{MaxRows: slots}, {MaxRows: slots, SyncEvery: 1, NoPrefixSharing: true}, {MaxRows: slots, SyncEvery: 5, CUDAGraphs: true}} {
				var st SlotStats
				o.Stats, o.Detokenize = &st, idText
				got, err := m.Generate(slotPrompts, p, o)
				if err != nil {
					t.Fatalf("case %d, %d slots: %v", ci, slots, err)
				}
				if sampleKey(got) != sampleKey(whole) {
					t.Fatalf("case %d, %d slots (sync every %d, sharing %v):\n%s\none batch:\n%s", ci, slots, o.SyncEvery, !o.NoPrefixSharing, sampleKey(got), sampleKey(whole))
				}
				if d := maxLogprobDiff(t, got, whole); d > 1e-6 {
					t.Errorf("case %d, %d slots: log-probs differ by %g", ci, slots, d)
				}
				if st.Slots != slots || st.Steps == 0 {
					t.Errorf("case %d: stats %+v for %d slots", ci, st, slots)
				}
			}
		}
	}
}

// In fp32 the slots engine's log-probabilities agree with one batch's
// within fp32 rounding wherever the tokens so far agree.
func TestSlotsFP32LogprobsAgree(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 10, Seed: 5, StopIDs: []int64{3, 17, 40}}
	whole, err := m.Generate(slotPrompts, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Generate(slotPrompts, p, GenerateOptions{MaxRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	same, worst := 0, 0.0
	for i := range got {
		for j := 0; j < min(len(got[i].IDs), len(whole[i].IDs)); j++ {
			worst = max(worst, math.Abs(float64(got[i].Logprobs[j]-whole[i].Logprobs[j])))
			if got[i].IDs[j] != whole[i].IDs[j] {
				break
			}
			same++
		}
	}
	t.Logf("%d tokens compared, log-probs within %g", same, worst)
	if gap := logprobGap(t, m, slotPrompts, got, 1); gap > 1e-5 {
		t.Errorf("the slots' recorded log-probs differ from the trainer's by %g", gap)
	}
	if worst > 1e-4 || same < 20 {
		t.Errorf("fp32: %d tokens agree, log-probs differ by up to %g", same, worst)
	}
}

// turnScript parks each sample named in at when it has that many ids, and
// answers with the ids append gives (after delay's channel, if set).
type turnScript struct {
	at      map[[2]int][]int // sample → the id counts at which it parks
	append  func(prompt, index, turn int) []int64
	delay   func(prompt, index int) <-chan struct{} // nil: answer at once
	resumes chan Resume
	turns   map[[2]int]int
	errs    chan error
}

func newTurnScript(at map[[2]int][]int, add func(prompt, index, turn int) []int64) *turnScript {
	return &turnScript{at: at, append: add, resumes: make(chan Resume, 64), turns: map[[2]int]int{}, errs: make(chan error, 8)}
}

func (ts *turnScript) options() *Turns {
	return &Turns{
		ParkIf: func(prompt, index int, ids []int64) bool {
			k := [2]int{prompt, index}
			return slices.Contains(ts.at[k], len(ids))
		},
		Parked: func(s Sample) {
			k := [2]int{s.Prompt, s.Index}
			turn := ts.turns[k]
			ts.turns[k]++
			rs := Resume{Prompt: s.Prompt, Index: s.Index, Append: ts.append(s.Prompt, s.Index, turn)}
			var wait <-chan struct{}
			if ts.delay != nil {
				wait = ts.delay(s.Prompt, s.Index)
			}
			go func() {
				if wait != nil {
					select {
					case <-wait:
					case <-time.After(60 * time.Second):
						ts.errs <- fmt.Errorf("sample %v: never released", k)
					}
				}
				ts.resumes <- rs
			}()
		},
		Resumes: ts.resumes,
	}
}

// generate runs m.Generate with the script's turns in o and fails the
// test on an error of the engine or of the script.
func (sc *turnScript) generate(t *testing.T, m *Model, reqs []Request, p SamplingParams, o GenerateOptions) []Sample {
	t.Helper()
	out, err := m.Generate(reqs, p, o)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sc.errs:
		t.Fatal(err)
	default:
	}
	return out
}

// TestAppendEqualsConcatenatedPrompt: a sample that parks after k tokens
// and resumes with ids appended goes on exactly as a request whose prompt
// is the prompt, those k tokens and the appended ids, drawing from its
// stream where the parked sample left it; the appended ids are marked, with
// NaN log-probabilities, and count in the token budget.
func TestAppendEqualsConcatenatedPrompt(t *testing.T) {
	lockThread(t)
	m := tinyModel64(t, "qwen3-gqa3")
	for _, temp := range []float64{0, 1} {
		p := SamplingParams{Temperature: temp, MaxNewTokens: 14, Seed: 11}
		add := []int64{21, 22, 23}
		for _, slots := range []int{0, 2} {
			sc := newTurnScript(map[[2]int][]int{{0, 1}: {3}, {3, 2}: {1, 8}}, func(prompt, index, turn int) []int64 { return add[:1+turn%3] })
			got, err := m.Generate(slotPrompts, p, GenerateOptions{MaxRows: slots, Turns: sc.options()})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := m.Generate(slotPrompts, p, GenerateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range got {
				parks := sc.at[[2]int{s.Prompt, s.Index}]
				if len(parks) == 0 {
					if fmt.Sprint(s.IDs) != fmt.Sprint(plain[i].IDs) {
						t.Errorf("T %g, %d slots: sample %d (no turns) %v, without turns %v", temp, slots, i, s.IDs, plain[i].IDs)
					}
					continue
				}
				// Replay: each turn a fresh request whose prompt is
				// everything so far, at the parked sample's next draw.
				prompt := append([]int64(nil), slotPrompts[s.Prompt].PromptIDs...)
				var ids []int64
				sampled := 0
				for turn := 0; ; turn++ {
					limit := p.MaxNewTokens - len(ids)
					if turn < len(parks) {
						limit = parks[turn] - len(ids)
					}
					req := Request{PromptIDs: append(append([]int64(nil), prompt...), ids...), MaxNewTokens: limit, drawOffset: sampled}
					cont, err := m.generateOne(req, s.Prompt, s.Index, p)
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, cont...)
					sampled += len(cont)
					if turn >= len(parks) || len(cont) < limit {
						break
					}
					ids = append(ids, add[:1+turn%3]...)
				}
				if fmt.Sprint(s.IDs) != fmt.Sprint(ids) {
					t.Errorf("T %g, %d slots: sample %d/%d\n turns:  %v (appended %v)\n replay: %v", temp, slots, s.Prompt, s.Index, s.IDs, s.Appended, ids)
				}
				if len(s.Appended) != len(parks) {
					t.Errorf("sample %d/%d: appended ranges %v for %d parks", s.Prompt, s.Index, s.Appended, len(parks))
				}
				for _, a := range s.Appended {
					for j := a[0]; j < a[1]; j++ {
						if !math.IsNaN(float64(s.Logprobs[j])) {
							t.Errorf("appended token %d has log-prob %g", j, s.Logprobs[j])
						}
					}
				}
				if len(s.IDs) > p.MaxNewTokens {
					t.Errorf("sample %d/%d: %d ids over the budget %d", s.Prompt, s.Index, len(s.IDs), p.MaxNewTokens)
				}
			}
		}
	}
}

// generateOne samples one request as sample index of stream prompt.
func (m *Model) generateOne(req Request, stream, index int, p SamplingParams) ([]int64, error) {
	req.Samples = index + 1
	out, err := m.GenerateAt([]Request{req}, []int{stream}, p, GenerateOptions{})
	if err != nil {
		return nil, err
	}
	return out[index].IDs, nil
}

// TestParkedRowNeitherWaitsNorChangesOthers: a sample parked until every
// other sample has finished does not hold them up (its resume is released
// only once they are done: were the engine waiting for it, this would
// never end), and they sample what they sample without it.
func TestParkedRowNeitherWaitsNorChangesOthers(t *testing.T) {
	lockThread(t)
	m := tinyModel64(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 10, Seed: 2, StopIDs: []int64{3, 17}}
	plain, err := m.Generate(slotPrompts, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	sc := newTurnScript(map[[2]int][]int{{0, 0}: {2}}, func(int, int, int) []int64 { return []int64{30} })
	sc.delay = func(int, int) <-chan struct{} { return release }
	others := len(plain) - 1
	var steps []int
	o := GenerateOptions{MaxRows: 4, SyncEvery: 2, Turns: sc.options(), Progress: func(step, finished, rows int) {
		if finished == others && release != nil {
			steps = append(steps, step)
			close(release)
			release = nil
		}
	}}
	got := sc.generate(t, m, slotPrompts, p, o)
	if len(steps) == 0 {
		t.Fatal("the others never all finished before the parked sample resumed")
	}
	for i := 1; i < len(got); i++ {
		if fmt.Sprint(got[i].IDs) != fmt.Sprint(plain[i].IDs) {
			t.Errorf("sample %d: %v beside a parked row, %v without", i, got[i].IDs, plain[i].IDs)
		}
	}
	if len(got[0].Appended) != 1 || got[0].IDs[2] != 30 {
		t.Errorf("the parked sample: %v, appended %v", got[0].IDs, got[0].Appended)
	}
}

// TestParkResumeCyclesLeakNothing: a hundred park/resume cycles leave no
// tensor behind.
func TestParkResumeCyclesLeakNothing(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 50, Seed: 4}
	every := []int{}
	for k := 1; k < 48; k += 2 {
		every = append(every, k)
	}
	run := func() int {
		sc := newTurnScript(map[[2]int][]int{{0, 0}: every, {0, 1}: every, {1, 0}: every, {2, 0}: every},
			func(int, int, int) []int64 { return []int64{7} })
		var st SlotStats
		if _, err := m.Generate(slotPrompts[:3], p, GenerateOptions{MaxRows: 3, SyncEvery: 4, Turns: sc.options(), Stats: &st}); err != nil {
			t.Fatal(err)
		}
		return st.Parks
	}
	run()
	runtime.GC()
	live := len(ts.ExistingTensors)
	parks := run() + run()
	runtime.GC()
	if parks < 100 {
		t.Fatalf("%d parks: the test shows little", parks)
	}
	if n := len(ts.ExistingTensors); n > live {
		t.Errorf("live tensors went from %d to %d over %d park/resume cycles", live, n, parks)
	}
}

// TestSlotsKeepTheBatchFull: with long-tailed lengths (per-request caps,
// no stops), the slots engine's steps stay near Σ lengths / slots + the
// longest, against consecutive batches that pay each batch's longest.
func TestSlotsKeepTheBatchFull(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	r := rand.New(rand.NewSource(1))
	var reqs []Request
	sum, longest := 0, 0
	for i := 0; i < 40; i++ {
		n := min(60, max(1, int(math.Exp(2.3+0.9*r.NormFloat64()))))
		reqs = append(reqs, Request{PromptIDs: []int64{int64(1 + i%20), 4, 5}, MaxNewTokens: n})
		sum += n
		longest = max(longest, n)
	}
	p := SamplingParams{Temperature: 1, MaxNewTokens: 60, Seed: 9}
	const slots = 8
	var a, b SlotStats
	got, err := m.Generate(reqs, p, GenerateOptions{MaxRows: slots, SyncEvery: 4, Stats: &a})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(reqs, p, GenerateOptions{MaxRows: slots, SyncEvery: 4, ConsecutiveBatches: true, Stats: &b}); err != nil {
		t.Fatal(err)
	}
	for i, s := range got {
		if len(s.IDs) != reqs[i].MaxNewTokens || s.FinishReason != "length" {
			t.Fatalf("request %d: %d ids (%s), cap %d", i, len(s.IDs), s.FinishReason, reqs[i].MaxNewTokens)
		}
	}
	t.Logf("Σ %d, longest %d: slots %d steps (occupancy %.3f, %.3f while waiting), batches %d steps (%.3f, %.3f)",
		sum, longest, a.Steps, a.Occupancy(), a.OccupancyWaiting(), b.Steps, b.Occupancy(), b.OccupancyWaiting())
	if a.BusySlotSteps != int64(sum) {
		t.Errorf("busy slot-steps %d, want Σ lengths %d", a.BusySlotSteps, sum)
	}
	if bound := 1.1*float64(sum)/slots + float64(longest); float64(a.Steps) > bound {
		t.Errorf("slots took %d steps, over 1.1 × Σ/slots + longest = %.0f", a.Steps, bound)
	}
	if a.Steps >= b.Steps {
		t.Errorf("slots %d steps, consecutive batches %d", a.Steps, b.Steps)
	}
}

// Review cases: a structured output whose request cap ends on a header
// token (the row is freed after the forced token is in); compaction only
// when the batch really shrinks (graphs are not dropped at every look); a
// resume with an id outside the vocabulary and a closed resumes channel
// are errors that name the sample.
func TestSlotsEdges(t *testing.T) {
	lockThread(t)
	m := tinyModel64(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 1, Seed: 3, Segments: []Segment{{MaxTokens: 2}, {Header: []int64{11, 12}, MaxTokens: 3}}}
	reqs := []Request{{PromptIDs: []int64{5, 9}, Samples: 3, MaxNewTokens: 3}, {PromptIDs: []int64{4}, Samples: 2}}
	whole, err := m.Generate(reqs, p, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Generate(reqs, p, GenerateOptions{MaxRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sampleKey(got) != sampleKey(whole) || got[0].IDs[2] != 11 {
		t.Errorf("a cap on a header:\n%s\none batch:\n%s", sampleKey(got), sampleKey(whole))
	}
	q := SamplingParams{Temperature: 1, MaxNewTokens: 40, Seed: 1}
	var reqs12 []Request
	for i := 0; i < 12; i++ {
		reqs12 = append(reqs12, Request{PromptIDs: []int64{int64(i + 1), 3}})
	}
	sc := newTurnScript(map[[2]int][]int{{0, 0}: {30}}, func(int, int, int) []int64 { return []int64{5} })
	var gs GraphStats
	if _, err := m.Generate(reqs12, q, GenerateOptions{SyncEvery: 4, CUDAGraphs: true, GraphStats: &gs, Turns: sc.options()}); err != nil {
		t.Fatal(err)
	}
	if len(gs.Resets) > 3 {
		t.Errorf("%d graph resets over %d steps: compaction that does not shrink the batch", len(gs.Resets), len(gs.Steps))
	}
	ch := make(chan Resume, 8)
	bad := &Turns{ParkIf: func(_, _ int, ids []int64) bool { return len(ids) == 2 }, Resumes: ch, Parked: func(s Sample) {
		ch <- Resume{Prompt: s.Prompt, Index: s.Index, Append: []int64{m.Config.VocabSize}}
	}}
	if _, err := m.Generate(reqs12[:2], q, GenerateOptions{Turns: bad}); err == nil || !strings.Contains(err.Error(), "resume of request 0 sample 0") {
		t.Errorf("an appended id outside the vocabulary: %v", err)
	}
	// ParkIf on a stop id parks instead of stopping (a turn's end after a
	// tool call); the sample goes on after its append.
	stopP := SamplingParams{Temperature: 1, MaxNewTokens: 30, Seed: 7, StopIDs: []int64{3, 17, 40}}
	plain, err := m.Generate(slotPrompts, stopP, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := make(chan Resume, 16)
	once := map[[2]int]bool{}
	onStop := &Turns{Resumes: rc,
		ParkIf: func(pr, ix int, ids []int64) bool {
			k := [2]int{pr, ix}
			if once[k] || !slices.Contains(stopP.StopIDs, ids[len(ids)-1]) {
				return false
			}
			once[k] = true
			return true
		},
		Parked: func(s Sample) { rc <- Resume{Prompt: s.Prompt, Index: s.Index, Append: []int64{50, 51}} }}
	turned, err := m.Generate(slotPrompts, stopP, GenerateOptions{Turns: onStop})
	if err != nil {
		t.Fatal(err)
	}
	went := 0
	for i, s := range turned {
		if plain[i].FinishReason != "stop" {
			continue
		}
		n := len(plain[i].IDs)
		if fmt.Sprint(s.IDs[:n]) != fmt.Sprint(plain[i].IDs) || len(s.Appended) != 1 || s.Appended[0] != [2]int{n, n + 2} {
			t.Errorf("sample %d: %v appended %v; without turns it stopped: %v", i, s.IDs, s.Appended, plain[i].IDs)
		}
		if len(s.IDs) > n+2 {
			went++
		}
	}
	if went == 0 {
		t.Error("no sample went on after parking on its stop id")
	}
	closed := make(chan Resume)
	shut := &Turns{ParkIf: func(_, _ int, ids []int64) bool { return len(ids) == 2 }, Resumes: closed, Parked: func(Sample) {}}
	close(closed)
	if _, err := m.Generate(reqs12[:2], q, GenerateOptions{Turns: shut}); err == nil || !strings.Contains(err.Error(), "closed with 2 sample(s) parked (request 0 sample 0, request 1 sample 0)") {
		t.Errorf("a closed resumes channel: %v", err)
	}
}

// TestLockstepIgnoresAnswerTiming: in lockstep, a generation whose parked
// samples are answered late, in an order of their own, runs the schedule
// of one answered at once — the same decode steps, looks and prefills,
// and the same tokens and log-probabilities bit for bit. Without lockstep
// the late answers change the schedule (the test's control).
func TestLockstepIgnoresAnswerTiming(t *testing.T) {
	lockThread(t)
	m := tinyModel(t, "qwen3-gqa3")
	p := SamplingParams{Temperature: 1, MaxNewTokens: 12, Seed: 6}
	parks := map[[2]int][]int{{0, 0}: {2, 6}, {0, 2}: {3}, {1, 1}: {2}, {3, 0}: {4}, {3, 3}: {1}}
	run := func(lockstep bool, late map[[2]int]time.Duration) ([]Sample, SlotStats) {
		sc := newTurnScript(parks, func(prompt, index, turn int) []int64 { return []int64{int64(20 + turn), 31} })
		if late != nil {
			sc.delay = func(prompt, index int) <-chan struct{} {
				c := make(chan struct{})
				time.AfterFunc(late[[2]int{prompt, index}], func() { close(c) })
				return c
			}
		}
		o := GenerateOptions{MaxRows: 4, SyncEvery: 2, Turns: sc.options()}
		o.Turns.Lockstep = lockstep
		var st SlotStats
		o.Stats = &st
		return sc.generate(t, m, slotPrompts, p, o), st
	}
	// Late answers, the later-parked first: all long after the other rows
	// could have finished.
	late := map[[2]int]time.Duration{{0, 0}: 400 * time.Millisecond, {0, 2}: 250 * time.Millisecond, {1, 1}: 100 * time.Millisecond,
		{3, 0}: 300 * time.Millisecond, {3, 3}: 50 * time.Millisecond}
	at, atStats := run(true, nil)
	later, laterStats := run(true, late)
	if atStats.Parks == 0 {
		t.Fatal("no sample parked: the test shows nothing")
	}
	if atStats != laterStats {
		t.Errorf("lockstep: the schedule moved with the answers' timing:\n%+v\n%+v", atStats, laterStats)
	}
	if sampleKey(at) != sampleKey(later) {
		t.Errorf("lockstep: tokens moved with the answers' timing:\n%s\n%s", sampleKey(at), sampleKey(later))
	}
	for i := range at {
		for j := range at[i].Logprobs {
			if math.Float32bits(at[i].Logprobs[j]) != math.Float32bits(later[i].Logprobs[j]) {
				t.Fatalf("lockstep: sample %d token %d log-prob %g, %g with late answers", i, j, at[i].Logprobs[j], later[i].Logprobs[j])
			}
		}
	}
	if _, free := run(false, late); free.Steps == atStats.Steps && free.Looks == atStats.Looks && free.Prefills == atStats.Prefills {
		t.Errorf("without lockstep, late answers kept the schedule (%+v): the control shows nothing", free)
	}
}
