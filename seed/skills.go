package seed

import (
	"fmt"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
	"github.com/lanpo-rl/lanpo/trainer"
)

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
	res, err := s.sample(reqs, streams, s.step, rl.StreamSeedAnswers, "seed-answers")
	if err != nil {
		return nil, err
	}
	out := make([]attempt, len(res))
	for i, r := range res {
		text := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		cut := r.FinishReason == "length"
		ok, err := s.correct(probs[r.Prompt], text, cut)
		if err != nil {
			return nil, err
		}
		out[i] = attempt{problem: r.Prompt, text: text, cut: cut, correct: ok}
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
		code := s.o.Config.LANPO.Code
		clean.Principles, clean.Pitfalls = pool.StripForeign(sum.Principles, pr.Problem, code, pr.Answer), pool.StripForeign(sum.Pitfalls, pr.Problem, code, pr.Answer)
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
	res, err := s.sample(reqs, streams, s.step, rl.StreamSeedReflect, "seed-reflect")
	if err != nil {
		return err
	}
	for _, r := range res {
		it := items[r.Prompt]
		redo := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		if err := s.keepReflection(probs[it.a.problem], it.a, it.text, redo, r.FinishReason == "length", out); err != nil {
			return err
		}
	}
	return nil
}

// keepReflection keeps a redo that verifies correct, while the kept
// examples stay balanced between right and wrong shown attempts: a
// right-then-right only while there are at least as many wrong-then-right,
// and the reverse. text is what the redo's prompt showed of the attempt;
// the example shows the same.
func (s *seeder) keepReflection(pr trainer.Problem, shown *attempt, text, redo string, cut bool, out *[]Example) error {
	ok, err := s.correct(pr, redo, cut)
	if err != nil {
		return err
	}
	why := ""
	switch {
	case !ok:
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
	return nil
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
	res, err := s.sample(reqs, streams, bi, rl.StreamSeedAbstract, "seed-abstract")
	if err != nil {
		return err
	}
	for _, r := range res {
		i := which[r.Prompt]
		pr := probs[i]
		sol := s.tk.Decode(tokenizer.Ints(r.IDs), true)
		why := ""
		ok, err := s.correct(pr, sol, r.FinishReason == "length")
		if err != nil {
			return err
		}
		if !ok {
			why = "solve with the plan wrong"
		}
		if s.o.Config.LANPO.GivesLessons() { // no condenser: the solve with the lessons alone
			if s.decide(out, s.b.SolveWithLessons(pr.ID, pr.Problem, abs[i].Lessons, sol), why) {
				st.Kept++
			}
			continue
		}
		// Both chats or neither: the condensed plan and its use.
		if s.decide(out, s.b.Condense(pr.ID, pr.Problem, abs[i].Lessons, abs[i].Text), why) {
			st.Kept++
			*out = append(*out, s.b.SolveWithPlan(pr.ID, pr.Problem, abs[i].Text, sol))
		}
	}
	return nil
}

// sample generates for reqs at rollout.temperature and top_p within
// rollout.max_new_tokens, with no grad; the random stream is keyed by
// (step, stream, purpose) and the run seed.
func (s *seeder) sample(reqs []model.Request, streams []int, step, stream int, purpose string) ([]model.Sample, error) {
	cfg := s.o.Config
	eos, err := s.m.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, MaxNewTokens: cfg.Rollout.MaxNewTokens,
		StopIDs: eos, Seed: rl.DrawKey(step, stream, purpose) ^ cfg.Seed}
	var res []model.Sample
	err = csrc.NoGrad(func() (err error) {
		res, err = s.m.GenerateAt(reqs, streams, sp, cfg.Rollout.GenerateOptions())
		return err
	})
	return res, err
}
