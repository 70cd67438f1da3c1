package seed

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/trainer"
)

// lanpo seed builds the SFT data that teaches LANPO's skills before RL
// (the paper's ~3K examples), from the user's problems, with the model
// itself (self-distillation, the paper's "bootstrapping") or a teacher, and
// keeps only what the verifier and format checks accept:
//
//   - answer: k sampled solutions per problem; kept when the verifier says
//     the final answer is right (rejection sampling).
//   - summarize: the summarization prompt over right and wrong attempts;
//     kept when all three fields are non-empty, none ran out of its token
//     budget, and the summary is not a copy of the attempt.
//   - reflect: the reflection prompt over an attempt (right or wrong, the
//     prompt says neither); kept when the redo verifies correct, balanced
//     so about as many shown attempts were right as wrong (else the model
//     learns that a shown attempt is usually wrong).
//   - abstract: the condensing prompt over lessons retrieved (the trainer's
//     retrieval and relevance filter) from a pool of the other problems'
//     kept summaries, and the solve prompt with the plan; kept when that
//     solve verifies correct.
//
// Gold answers go to the verifier only: no prompt builder receives one, so
// none can appear in a kept prompt (TestSeedNeverShowsGold).

// Options configure a seed run.
type Options struct {
	Config   trainer.Config // prompts, the lanpo section (scorer, γ, budgets), rollout.max_new_tokens/temperature
	Problems []trainer.Problem
	Out      string             // the seed file; Out+".state.json" and Out+".pool.jsonl" beside it
	N        int                // examples wanted in all
	Mix      map[string]float64 // share of each skill (normalized)
	K        int                // answers sampled per problem
	Batch    int                // problems per batch (the unit of resume)
	Resume   bool
	Progress io.Writer
	// Rejected, if set, receives every rejected candidate's chat with the
	// reason ({"example": …, "reason": …} per line), to inspect the filters.
	Rejected io.Writer
	// StopAfterBatches ends the run after that many batches of this
	// invocation (0: run to the end); --resume continues it.
	StopAfterBatches int
}

// Stats counts one skill's candidates and why they were rejected.
type Stats struct {
	Tried    int            `json:"tried"`
	Kept     int            `json:"kept"`
	Target   int            `json:"target"`
	Rejected map[string]int `json:"rejected"`
}

func (s *Stats) reject(why string) {
	if s.Rejected == nil {
		s.Rejected = map[string]int{}
	}
	s.Rejected[why]++
}

// state is what a resumed run needs: batches done and the statistics.
type state struct {
	Batches int               `json:"batches_done"`
	Stats   map[string]*Stats `json:"stats"`
	// Reflect balance: kept reflections whose shown attempt was right/wrong.
	RightShown int `json:"reflect_right_shown"`
	WrongShown int `json:"reflect_wrong_shown"`
}

// Run runs lanpo seed with m as the teacher (the model itself, or a
// stronger one) and tk its tokenizer, and returns the statistics.
func Run(m *model.Model, tk *tokenizer.Tokenizer, o Options) (map[string]*Stats, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	targets, err := targets(o.N, o.Mix)
	if err != nil {
		return nil, err
	}
	if o.K < 1 || o.Batch < 1 {
		return nil, fmt.Errorf("seed: k and batch must be ≥ 1")
	}
	st, p, err := o.openState(targets)
	if err != nil {
		return nil, err
	}
	f, err := feedback.NewBuilder(m, tk, o.Config.FeedbackSettings(), p)
	if err != nil {
		return nil, err
	}
	b, err := NewBuilder(o.Config, tk)
	if err != nil {
		return nil, err
	}
	out, err := os.OpenFile(o.Out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	s := &seeder{m: m, tk: tk, f: f, b: b, o: o, st: st}
	batches := (len(o.Problems) + o.Batch - 1) / o.Batch
	bar := progress.New(o.Progress, "seed", batches, st.Batches)
	startBatch := st.Batches
	for bi := st.Batches; bi < batches && !s.done(); bi++ {
		if o.StopAfterBatches > 0 && bi-startBatch == o.StopAfterBatches {
			break
		}
		lo, hi := bi*o.Batch, min((bi+1)*o.Batch, len(o.Problems))
		exs, err := s.batch(bi, o.Problems[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("seed, problems %d-%d: %w", lo+1, hi, err)
		}
		enc := jsonl.Encoder(out)
		for _, e := range exs {
			if err := enc.Encode(e); err != nil {
				return nil, err
			}
		}
		if err := out.Sync(); err != nil {
			return nil, err
		}
		st.Batches = bi + 1
		if err := o.saveState(st, p); err != nil {
			return nil, err
		}
		bar.Update(st.Batches, s.line())
		if o.Progress == nil {
			log.Info().Int("batch", bi+1).Int("of", batches).Str("kept", s.line()).Msg("seed")
		}
	}
	bar.Done(s.line())
	return st.Stats, nil
}

// targets splits n examples over the skills by the mix.
func targets(n int, mix map[string]float64) (map[string]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("--n must be ≥ 1")
	}
	total := 0.0
	for k, w := range mix {
		if !slices.Contains(Skills, k) || w < 0 {
			return nil, fmt.Errorf("--mix %s=%g: want skills %s with weights ≥ 0", k, w, strings.Join(Skills, ", "))
		}
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("--mix: all weights are 0")
	}
	out := map[string]int{}
	for _, k := range Skills {
		out[k] = int(math.Round(float64(n) * mix[k] / total))
	}
	return out, nil
}

// openState starts or resumes a run: with Resume, the state and pool files
// say how far it got; the seed file is cut back to the examples of the
// batches done (a batch cut short by a kill is run again).
func (o Options) openState(targets map[string]int) (*state, *pool.Pool, error) {
	st := &state{Stats: map[string]*Stats{}}
	for _, k := range Skills {
		st.Stats[k] = &Stats{Target: targets[k]}
	}
	pc := o.Config.LANPO.PoolConfig()
	statePath, poolPath := o.Out+".state.json", o.Out+".pool.jsonl"
	_, err := os.Stat(o.Out)
	exists := err == nil
	if exists && !o.Resume {
		return nil, nil, fmt.Errorf("%s exists: pass --resume to continue it, or choose another --out", o.Out)
	}
	if !exists || !o.Resume {
		p, err := pool.New(pc)
		return st, p, err
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		return nil, nil, fmt.Errorf("--resume: %w", err)
	}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", statePath, err)
	}
	for _, k := range Skills {
		if st.Stats[k] == nil || st.Stats[k].Target != targets[k] {
			return nil, nil, fmt.Errorf("--resume: %s was made with other --n/--mix targets (%s)", o.Out, k)
		}
	}
	p, err := pool.New(pc)
	if st.Batches > 0 {
		p, err = pool.Load(poolPath, pc)
	}
	if err != nil {
		return nil, nil, err
	}
	kept := 0
	for _, k := range Skills {
		kept += st.Stats[k].Kept
	}
	exs, err := jsonl.Read[Example](o.Out)
	if err != nil && kept > 0 {
		return nil, nil, err
	}
	if len(exs) < kept {
		return nil, nil, fmt.Errorf("--resume: %s has %d examples, its state says %d", o.Out, len(exs), kept)
	}
	if err := jsonl.WriteFile(o.Out, exs[:kept]); err != nil {
		return nil, nil, err
	}
	log.Info().Int("batches", st.Batches).Int("examples", kept).Msg("resuming seed")
	return st, p, nil
}

func (o Options) saveState(st *state, p *pool.Pool) error {
	var buf strings.Builder
	if err := p.Write(&buf); err != nil {
		return err
	}
	if err := fsutil.WriteFileSync(o.Out+".pool.jsonl", []byte(buf.String())); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(st, "", "  ")
	return fsutil.WriteFileSync(o.Out+".state.json", append(js, '\n'))
}

// seeder runs batches.
type seeder struct {
	m    *model.Model
	tk   *tokenizer.Tokenizer
	f    *feedback.Builder // the trainer's prompts: reflection, plans, summaries
	b    *Builder          // the seed chats
	o    Options
	st   *state
	step int // the batch: keys every random stream
}

func (s *seeder) done() bool {
	for _, k := range Skills {
		if st := s.st.Stats[k]; st.Kept < st.Target {
			return false
		}
	}
	return true
}

func (s *seeder) want(skill string) bool { st := s.st.Stats[skill]; return st.Kept < st.Target }

func (s *seeder) line() string {
	var parts []string
	for _, k := range Skills {
		st := s.st.Stats[k]
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, st.Kept, st.Target))
	}
	return strings.Join(parts, ", ")
}

// decide keeps e (why == "") unless its skill has enough, or rejects it
// for why; rejected chats go to Options.Rejected. It reports whether e was
// kept.
func (s *seeder) decide(out *[]Example, e Example, why string) bool {
	st := s.st.Stats[e.Skill]
	st.Tried++
	if why == "" && st.Kept >= st.Target {
		why = "target reached"
	}
	if why != "" {
		st.reject(why)
		if s.o.Rejected != nil {
			jsonl.Encoder(s.o.Rejected).Encode(struct {
				Example Example `json:"example"`
				Reason  string  `json:"reason"`
			}{e, why})
		}
		return false
	}
	st.Kept++
	*out = append(*out, e)
	return true
}

// attempt is one sampled answer.
type attempt struct {
	problem int // index in the batch
	text    string
	correct bool
	cut     bool // truncated
}

// batch makes one batch's examples, skill by skill.
func (s *seeder) batch(bi int, probs []trainer.Problem) ([]Example, error) {
	s.f.SetStep(bi) // keys every random stream of the batch
	s.step = bi
	var out []Example
	atts, err := s.answers(probs)
	if err != nil {
		return nil, err
	}
	s.keepAnswers(probs, atts, &out)
	if s.want(SkillSummarize) || s.want(SkillAbstract) {
		if err := s.summaries(probs, atts, &out); err != nil {
			return nil, err
		}
	}
	if s.want(SkillReflect) {
		if err := s.reflections(probs, atts, &out); err != nil {
			return nil, err
		}
	}
	if s.want(SkillAbstract) {
		if err := s.abstractions(bi, probs, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// keepAnswers keeps the right answers (rejection sampling).
func (s *seeder) keepAnswers(probs []trainer.Problem, atts []attempt, out *[]Example) {
	for _, a := range atts {
		if !s.want(SkillAnswer) {
			return
		}
		why := ""
		if !a.correct {
			why = "wrong answer"
		}
		s.decide(out, s.b.Answer(probs[a.problem].ID, probs[a.problem].Problem, a.text), why)
	}
}

// answers samples o.K solutions per problem at rollout.temperature and
// verifies them.
func (s *seeder) answers(probs []trainer.Problem) ([]attempt, error) {
	cfg := s.o.Config
	reqs := make([]model.Request, len(probs))
	streams := make([]int, len(probs))
	for i, p := range probs {
		ids, err := cfg.PromptFormat().SolveIDs(s.tk, p.Problem)
		if err != nil {
			return nil, fmt.Errorf("problem %s: %w", p.ID, err)
		}
		reqs[i], streams[i] = model.Request{PromptIDs: ids, Samples: s.o.K}, i
	}
	eos, err := s.m.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, MaxNewTokens: cfg.Rollout.MaxNewTokens,
		StopIDs: eos, Seed: rl.DrawKey(s.step, rl.StreamSeedAnswers, "seed-answers") ^ cfg.Seed}
	var res []model.Sample
	err = csrc.NoGrad(func() (err error) {
		res, err = s.m.GenerateAt(reqs, streams, sp, cfg.Rollout.GenerateOptions())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]attempt, len(res))
	for i, r := range res {
		text := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		cut := r.FinishReason == "length"
		out[i] = attempt{problem: r.Prompt, text: text, cut: cut, correct: reward.VerifyResponse(text, probs[r.Prompt].Answer, cut, reward.Options{}).Correct}
	}
	return out, nil
}

// firstOf returns, per problem, its first right and first wrong attempt.
func firstOf(atts []attempt, n int) (right, wrong []*attempt) {
	right, wrong = make([]*attempt, n), make([]*attempt, n)
	for i := range atts {
		a := &atts[i]
		if a.correct && right[a.problem] == nil {
			right[a.problem] = a
		}
		if !a.correct && wrong[a.problem] == nil {
			wrong[a.problem] = a
		}
	}
	return right, wrong
}

// summaries summarizes one right and one wrong attempt per problem (where
// there is one), keeps those that pass the checks, and adds every kept
// summary to the pool abstraction retrieves from.
func (s *seeder) summaries(probs []trainer.Problem, atts []attempt, out *[]Example) error {
	right, wrong := firstOf(atts, len(probs))
	var chosen []*attempt
	for i := range probs {
		for _, a := range []*attempt{right[i], wrong[i]} {
			if a != nil {
				chosen = append(chosen, a)
			}
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	problems, texts := make([]string, len(chosen)), make([]string, len(chosen))
	correct, indexes := make([]bool, len(chosen)), make([]int, len(chosen))
	for i, a := range chosen {
		problems[i], texts[i], correct[i], indexes[i] = probs[a.problem].Problem, a.text, a.correct, i
	}
	sums, err := s.f.Summarize(problems, texts, correct, indexes)
	if err != nil {
		return err
	}
	for i, a := range chosen {
		s.keepSummary(probs[a.problem], a, sums[i], out)
	}
	return nil
}

// keepSummary checks a summary; a good one enters the pool abstraction
// retrieves from (stripped of its problem's answer) and, while the skill
// wants more, the seed file.
func (s *seeder) keepSummary(pr trainer.Problem, a *attempt, sum pool.Summary, out *[]Example) {
	why := s.checkSummary(sum, a.text)
	if why == "" {
		clean := sum
		clean.Principles, clean.Pitfalls = pool.StripAnswers(sum.Principles, pr.Problem, pr.Answer), pool.StripAnswers(sum.Pitfalls, pr.Problem, pr.Answer)
		s.f.Pool().Add(pr.Problem, pool.Entry{ProblemID: pr.ID, Attempt: a.text, Summary: clean, Correct: a.correct, Truncated: a.cut})
	}
	if s.want(SkillSummarize) || why != "" {
		s.decide(out, s.b.Summarize(pr.ID, pr.Problem, s.f.ModelText(a.text), a.correct, sum), why)
	}
}

// checkSummary says why a summary is rejected ("" when it is kept): a
// field empty, a field that ran out of its token budget, or a summary that
// copies the attempt (half of its 5-grams are the attempt's).
func (s *seeder) checkSummary(sum pool.Summary, attemptText string) string {
	fields := []string{sum.Principles, sum.Pitfalls}
	if len(s.f.Prompts().SummaryHeaders()) == 3 {
		fields = append(fields, sum.FlowOfThought)
	}
	for _, f := range fields {
		if f == "" {
			return "empty field"
		}
		if s.f.TokenCount(f) >= s.o.Config.LANPO.SummaryFieldTokens {
			return "field over its token budget"
		}
	}
	if pool.CharOverlap(sum.FlowOfThought+" "+sum.Principles+" "+sum.Pitfalls, attemptText) >= 0.5 {
		return "copies the attempt"
	}
	return ""
}

// reflections shows each problem's first right and first wrong attempt
// with the reflection prompt and keeps redos that verify correct, so that
// kept examples show right and wrong attempts in equal numbers.
func (s *seeder) reflections(probs []trainer.Problem, atts []attempt, out *[]Example) error {
	right, wrong := firstOf(atts, len(probs))
	type shown struct {
		a    *attempt
		ids  []int64
		text string // what the prompt shows of the attempt
		from bool   // the shown attempt was right
	}
	var items []shown
	for i := range probs {
		for _, a := range []*attempt{wrong[i], right[i]} {
			if a == nil {
				continue
			}
			ids, text, ok, err := s.f.Reflect(probs[i].Problem, pool.Attempt{Text: a.text})
			if err != nil {
				return err
			}
			if ok {
				items = append(items, shown{a, ids, text, a.correct})
			}
		}
	}
	if len(items) == 0 {
		return nil
	}
	reqs := make([]model.Request, len(items))
	streams := make([]int, len(items))
	for i, it := range items {
		reqs[i], streams[i] = model.Request{PromptIDs: it.ids, Samples: 1}, i
	}
	cfg := s.o.Config
	eos, err := s.m.EOSTokenIDs()
	if err != nil {
		return err
	}
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, MaxNewTokens: cfg.Rollout.MaxNewTokens,
		StopIDs: eos, Seed: rl.DrawKey(s.step, rl.StreamSeedReflect, "seed-reflect") ^ cfg.Seed}
	var res []model.Sample
	if err := csrc.NoGrad(func() (err error) {
		res, err = s.m.GenerateAt(reqs, streams, sp, cfg.Rollout.GenerateOptions())
		return err
	}); err != nil {
		return err
	}
	for _, r := range res {
		it := items[r.Prompt]
		redo := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		s.keepReflection(probs[it.a.problem], it.a, it.text, redo, r.FinishReason == "length", out)
	}
	return nil
}

// keepReflection keeps a redo that verifies correct, while the kept
// examples stay balanced between right and wrong shown attempts: a
// right-then-right only while there are at least as many wrong-then-right,
// and the reverse. text is what the redo's prompt showed of the attempt;
// the example shows the same.
func (s *seeder) keepReflection(pr trainer.Problem, shown *attempt, text, redo string, cut bool, out *[]Example) {
	why := ""
	switch {
	case !reward.VerifyResponse(redo, pr.Answer, cut, reward.Options{}).Correct:
		why = "redo wrong"
	case shown.correct && s.st.RightShown > s.st.WrongShown, !shown.correct && s.st.WrongShown > s.st.RightShown:
		why = "outcome balance"
	}
	if s.decide(out, s.b.Reflect(pr.ID, pr.Problem, pool.Attempt{Text: text}, redo), why) {
		if shown.correct {
			s.st.RightShown++
		} else {
			s.st.WrongShown++
		}
	}
}

// abstractions builds, for each problem, a plan from related problems of
// the seed pool (other problems' kept summaries) through the trainer's
// retrieval, relevance filter and condenser, solves with it, and keeps the
// condense and solve chats when the solve verifies correct.
func (s *seeder) abstractions(bi int, probs []trainer.Problem, out *[]Example) error {
	st := s.st.Stats[SkillAbstract]
	ids, problems, indexes := make([]string, len(probs)), make([]string, len(probs)), make([]int, len(probs))
	for i, p := range probs {
		ids[i], problems[i], indexes[i] = p.ID, p.Problem, i
	}
	abs, err := s.f.Plans(ids, problems, indexes)
	if err != nil {
		return err
	}
	var reqs []model.Request
	var which, streams []int
	for i := range probs {
		if abs[i].IDs == nil {
			st.Tried++
			st.reject("no relevant lessons")
			continue
		}
		reqs, which, streams = append(reqs, model.Request{PromptIDs: abs[i].IDs, Samples: 1}), append(which, i), append(streams, i)
	}
	if len(reqs) == 0 {
		return nil
	}
	cfg := s.o.Config
	eos, err := s.m.EOSTokenIDs()
	if err != nil {
		return err
	}
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, MaxNewTokens: cfg.Rollout.MaxNewTokens,
		StopIDs: eos, Seed: rl.DrawKey(bi, rl.StreamSeedAbstract, "seed-abstract") ^ cfg.Seed}
	var res []model.Sample
	if err := csrc.NoGrad(func() (err error) {
		res, err = s.m.GenerateAt(reqs, streams, sp, cfg.Rollout.GenerateOptions())
		return err
	}); err != nil {
		return err
	}
	for _, r := range res {
		i := which[r.Prompt]
		pr := probs[i]
		sol := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		why := ""
		if !reward.VerifyResponse(sol, pr.Answer, r.FinishReason == "length", reward.Options{}).Correct {
			why = "solve with the plan wrong"
		}
		// Both chats or neither: the condensed plan and its use.
		if s.decide(out, s.b.Condense(pr.ID, pr.Problem, abs[i].Lessons, abs[i].Text), why) {
			st.Kept++
			*out = append(*out, s.b.SolveWithPlan(pr.ID, pr.Problem, abs[i].Text, sol))
		}
	}
	return nil
}
