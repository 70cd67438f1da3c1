package pool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Prompts are the texts of LANPO's prompts. All live here, so SFT seeding
// and RL ask the same questions; lanpo.prompts (a YAML file with these
// keys) overrides any of them. Placeholders in braces are filled in; each
// template must contain the ones its builder fills.
//
// The solve prompt itself is the run's data.prompt_template: a
// feedback-aware prompt replaces its {problem} with the problem followed by
// a context block (Reflection or Abstraction), so the answer format the
// template asks for is the same with and without feedback.
type Prompts struct {
	// System is the system message of the auxiliary prompts (summarize,
	// condense, relevance); "" leaves it out, and the chat template puts its
	// own default there if it has one.
	System string `yaml:"system"`
	// Reflection shows an earlier attempt ({attempt}) and asks for a
	// critique and a new solution. It must not say whether the attempt was
	// right.
	Reflection string `yaml:"reflection"`
	// Abstraction gives the plan condensed from related problems ({plan}).
	Abstraction string `yaml:"abstraction"`
	// Lessons gives related problems' principles and pitfalls ({lessons})
	// to the solver itself, asking it to work out which apply before it
	// solves (lanpo.context: lessons; no condenser call).
	Lessons string `yaml:"lessons"`
	// Condense asks for a plan for {problem} from {lessons}.
	Condense   string `yaml:"condense"`
	PlanHeader string `yaml:"plan_header"` // the condenser's answer starts with it
	// Summarize asks for the summary of {attempt} at {problem}, told the
	// {outcome}.
	Summarize      string `yaml:"summarize"`
	OutcomeCorrect string `yaml:"outcome_correct"`
	OutcomeWrong   string `yaml:"outcome_wrong"`
	// The summary's field headers: each field is generated after its
	// header, up to the next one, in one decode. The flow of thought is
	// optional ("": not generated, the default): nothing lanpo builds reads
	// it (reflection quotes the raw attempt, lessons are the principles
	// and pitfalls), so it is only for people reading the pool, and when
	// set it comes first, before the lessons.
	FlowHeader       string `yaml:"flow_header"`
	PrinciplesHeader string `yaml:"principles_header"`
	PitfallsHeader   string `yaml:"pitfalls_header"`
	// Relevance asks the policy to rate, with one digit 0-9, how much the
	// ideas of {candidate} help with {query}; the answer starts with
	// RatingPrefix and the rating is read from the next token.
	Relevance    string `yaml:"relevance"`
	RatingPrefix string `yaml:"rating_prefix"`
}

// DefaultPrompts are lanpo's prompts (the paper does not publish its own).
func DefaultPrompts() Prompts {
	return Prompts{
		Reflection: "Here is an earlier attempt at this problem:\n\n<attempt>\n{attempt}\n</attempt>\n\n" +
			"Go through the attempt step by step and point out anything that is wrong, unjustified or missing. " +
			"Then solve the problem again from the beginning.",
		Abstraction: "A plan drawn from related problems you have worked on:\n{plan}",
		Lessons: "While working on related problems you noted these principles and pitfalls:\n\n{lessons}\n\n" +
			"First work out which of them apply to this problem and how, then solve it.",
		Condense: "You are about to solve this problem:\n\n{problem}\n\n" +
			"While working on related problems you noted these principles and pitfalls:\n\n{lessons}\n\n" +
			"Write a short plan (at most five sentences) for the problem above: which ideas apply and what to watch out for. " +
			"Do not solve the problem and do not state an answer.",
		PlanHeader: "Plan:",
		Summarize: "Problem:\n{problem}\n\nAn attempt at it:\n<attempt>\n{attempt}\n</attempt>\n\n{outcome}\n\n" +
			"Summarize the attempt for your future self in two parts, one or two sentences each: " +
			"the principles worth reusing on other problems, and the pitfalls (what went or could go wrong).",
		OutcomeCorrect:   "Its final answer was checked and is correct.",
		OutcomeWrong:     "Its final answer was checked and is wrong.",
		PrinciplesHeader: "Principles:",
		PitfallsHeader:   "Pitfalls:",
		Relevance: "Problem A:\n{query}\n\nProblem B:\n{candidate}\n\n" +
			"Would the ideas that solve Problem B help to solve Problem A? " +
			"Rate from 0 (not at all) to 9 (the same ideas apply). Answer with one digit.",
		RatingPrefix: "Rating: ",
	}
}

// CodePrompts are lanpo's prompts for a code run (reward.kind: code), where
// a problem asks for a Python function and a response is a program that is
// right when the problem's tests pass. They ask what DefaultPrompts ask, in
// a programmer's words: reflection reviews an earlier program (bugs,
// unhandled cases) and writes it again, without saying whether it passed;
// plans name algorithms, idioms and edge cases and hold no code (StripCode
// removes what a plan or lesson copies anyway); the summarizer is told the
// outcome, as for math — that the program passed or failed the tests,
// never which assertion failed or the reward's reason. The summary headers,
// plan header and rating prefix are DefaultPrompts', so the summarizer's
// and relevance scorer's parsing is the same for both.
func CodePrompts() Prompts {
	p := DefaultPrompts()
	p.Reflection = "Here is an earlier program written for this problem:\n\n<attempt>\n{attempt}\n</attempt>\n\n" +
		"Review the program step by step: point out bugs, inputs or edge cases it does not handle " +
		"(empty input, boundaries, duplicates, large values) and anything the problem asks for that it misses. " +
		"Then write the program again from the beginning."
	p.Abstraction = "A plan drawn from related programming problems you have worked on:\n{plan}"
	p.Lessons = "While working on related programming problems you noted these principles and pitfalls:\n\n{lessons}\n\n" +
		"First work out which of them apply to this problem and how, then write the program."
	p.Condense = "You are about to write a program for this problem:\n\n{problem}\n\n" +
		"While working on related programming problems you noted these principles and pitfalls:\n\n{lessons}\n\n" +
		"Write a short plan (at most five sentences) for the problem above: which algorithms, data structures or Python idioms apply " +
		"and which edge cases to watch (empty input, boundaries, duplicates, large values). Do not write code."
	p.Summarize = "Problem:\n{problem}\n\nAn attempt at it:\n<attempt>\n{attempt}\n</attempt>\n\n{outcome}\n\n" +
		"Summarize the attempt for your future self in two parts, one or two sentences each, in words and without code: " +
		"the principles worth reusing on other problems (algorithms, idioms), and the pitfalls (bugs or unhandled cases that did or could make a program fail)."
	p.OutcomeCorrect = "Its program was run against the problem's tests and passed."
	p.OutcomeWrong = "Its program was run against the problem's tests and failed."
	p.Relevance = "Problem A:\n{query}\n\nProblem B:\n{candidate}\n\n" +
		"Would the ideas that solve Problem B (its algorithm, data structures, edge cases) help to solve Problem A? " +
		"Rate from 0 (not at all) to 9 (the same ideas apply). Answer with one digit."
	return p
}

// PromptsFor are a run's prompts: CodePrompts for a code run, else
// DefaultPrompts, with the overrides in the YAML file at path ("": none).
func PromptsFor(code bool, path string) (Prompts, error) {
	base := DefaultPrompts()
	if code {
		base = CodePrompts()
	}
	if path == "" {
		return base, nil
	}
	return LoadPromptsOver(path, base)
}

// LoadPrompts reads overrides from a YAML file onto DefaultPrompts;
// unknown keys are errors with their line.
func LoadPrompts(path string) (Prompts, error) { return LoadPromptsOver(path, DefaultPrompts()) }

// LoadPromptsOver reads overrides from a YAML file onto base (DefaultPrompts
// or CodePrompts): a key the file sets replaces base's text, the others
// stay base's. Unknown keys are errors with their line.
func LoadPromptsOver(path string, base Prompts) (Prompts, error) {
	p := base
	raw, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Validate checks that each template has its placeholders.
func (p Prompts) Validate() error {
	for _, c := range []struct {
		key, text string
		need      []string
	}{
		{"reflection", p.Reflection, []string{"{attempt}"}},
		{"abstraction", p.Abstraction, []string{"{plan}"}},
		{"lessons", p.Lessons, []string{"{lessons}"}},
		{"condense", p.Condense, []string{"{problem}", "{lessons}"}},
		{"summarize", p.Summarize, []string{"{problem}", "{attempt}", "{outcome}"}},
		{"relevance", p.Relevance, []string{"{query}", "{candidate}"}},
	} {
		for _, ph := range c.need {
			if !strings.Contains(c.text, ph) {
				return fmt.Errorf("prompt %s must contain %s", c.key, ph)
			}
		}
	}
	for key, h := range map[string]string{"principles_header": p.PrinciplesHeader, "pitfalls_header": p.PitfallsHeader} {
		if strings.TrimSpace(h) == "" {
			return fmt.Errorf("prompt %s must not be empty", key)
		}
	}
	return nil
}

// SummaryHeaders are the headers of the summary's fields in the order they
// are written: the flow of thought's first when it is set, then the
// principles' and the pitfalls'.
func (p Prompts) SummaryHeaders() []string {
	if strings.TrimSpace(p.FlowHeader) == "" {
		return []string{p.PrinciplesHeader, p.PitfallsHeader}
	}
	return []string{p.FlowHeader, p.PrinciplesHeader, p.PitfallsHeader}
}

// WithContext is the problem text a feedback-aware prompt puts where the
// solve template has {problem}: the problem, then the context block.
func WithContext(problem, context string) string { return problem + "\n\n" + context }

// ReflectionContext is the context block showing an earlier attempt. It is
// built from an Attempt, which has no outcome, so it cannot say whether the
// attempt was right.
func (p Prompts) ReflectionContext(a Attempt) string {
	return strings.ReplaceAll(p.Reflection, "{attempt}", a.Text)
}

// AbstractionContext is the context block with a condensed plan.
func (p Prompts) AbstractionContext(plan string) string {
	return strings.ReplaceAll(p.Abstraction, "{plan}", plan)
}

// LessonsContext is the context block with related problems' lessons
// (already stripped of answers by Pool.Lessons) for the solver to analyse.
func (p Prompts) LessonsContext(lessons []Lesson) string {
	return strings.ReplaceAll(p.Lessons, "{lessons}", lessonList(lessons))
}

// CondenseRequest asks for a plan for problem from other problems'
// lessons (already stripped of answers by Pool.Lessons).
func (p Prompts) CondenseRequest(problem string, lessons []Lesson) string {
	return strings.NewReplacer("{problem}", problem, "{lessons}", lessonList(lessons)).Replace(p.Condense)
}

// lessonList is lessons as "- Principle: …" and "- Pitfall: …" lines, a
// blank line between lessons.
func lessonList(lessons []Lesson) string {
	var b strings.Builder
	for i, l := range lessons {
		if i > 0 {
			b.WriteString("\n")
		}
		if l.Principles != "" {
			fmt.Fprintf(&b, "- Principle: %s\n", oneLine(l.Principles))
		}
		if l.Pitfalls != "" {
			fmt.Fprintf(&b, "- Pitfall: %s\n", oneLine(l.Pitfalls))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// SummarizeRequest asks for the summary of an attempt, told its outcome
// (the summary is used only for other problems, via lessons).
func (p Prompts) SummarizeRequest(problem, attempt string, correct bool) string {
	outcome := p.OutcomeWrong
	if correct {
		outcome = p.OutcomeCorrect
	}
	return strings.NewReplacer("{problem}", problem, "{attempt}", attempt, "{outcome}", outcome).Replace(p.Summarize)
}

// RelevanceRequest asks how much candidate's ideas help with query.
func (p Prompts) RelevanceRequest(query, candidate string) string {
	return strings.NewReplacer("{query}", query, "{candidate}", candidate).Replace(p.Relevance)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
