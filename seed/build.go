package seed

import (
	"strings"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// Seed examples teach the skills LANPO's loop relies on: answering in the
// training prompt's format, summarizing an attempt, reflecting on an
// earlier attempt, condensing related problems' lessons into a plan and
// solving with one. Each is one chat whose user turn is exactly what the
// trainer asks (the same builders: data.prompt_template, pool.Prompts,
// the same sanitizer for model-written text) and whose assistant turn is
// what a good policy would write, so SFT teaches what RL asks.

// Seed skills (lanpo seed --mix keys).
const (
	SkillAnswer    = "answer"
	SkillSummarize = "summarize"
	SkillReflect   = "reflect"
	SkillAbstract  = "abstract" // condensing a plan, and solving with it
)

// Skills lists the skills in the order lanpo seed reports them.
var Skills = []string{SkillAnswer, SkillSummarize, SkillReflect, SkillAbstract}

// Example is one line of the seed file: a chat lanpo sft trains on
// unchanged, the loss on its final (here: only) assistant turn.
type Example struct {
	Messages  []tokenizer.Message `json:"messages"`
	TrainOn   string              `json:"train_on"` // "last"
	Skill     string              `json:"skill"`
	ProblemID string              `json:"problem_id"`
	Part      string              `json:"part,omitempty"` // abstract: condense or solve
}

// Builder renders seed chats as the trainer renders its prompts.
type Builder struct {
	data    trainer.DataConfig
	prompts pool.Prompts
	tk      *tokenizer.Tokenizer // for the sanitizer; nil: none
}

// NewBuilder renders with cfg's data.prompt_template, data.system_prompt
// and lanpo.prompts; tk strips chat-control strings from model-written
// text (as the trainer does before text enters a prompt).
func NewBuilder(cfg trainer.Config, tk *tokenizer.Tokenizer) (*Builder, error) {
	prompts, err := pool.PromptsFor(cfg.LANPO.Code, cfg.LANPO.Prompts)
	if err != nil {
		return nil, err
	}
	return &Builder{data: cfg.Data, prompts: prompts, tk: tk}, nil
}

// Prompts are the builder's prompt texts.
func (b *Builder) Prompts() pool.Prompts { return b.prompts }

// clean is the sanitizer for model-written text.
func (b *Builder) clean(text string) string {
	if b.tk == nil {
		return text
	}
	text, _ = b.tk.StripAddedTokens(text)
	return text
}

// solveChat is the chat of a solve prompt for problem text (which may
// carry a context block) answered by response.
func (b *Builder) solveChat(problem, response string) []tokenizer.Message {
	var msgs []tokenizer.Message
	if b.data.SystemPrompt != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: b.data.SystemPrompt})
	}
	user := strings.ReplaceAll(b.data.PromptTemplate, "{problem}", problem)
	return append(msgs, tokenizer.Message{Role: "user", Content: user}, tokenizer.Message{Role: "assistant", Content: b.clean(response)})
}

// Answer is a solution to the bare problem in the training prompt.
func (b *Builder) Answer(problemID, problem, solution string) Example {
	return Example{Messages: b.solveChat(problem, solution), TrainOn: "last", Skill: SkillAnswer, ProblemID: problemID}
}

// SummaryText is how a summary reads as the policy writes it: each field
// after its header (pool.Prompts.SummaryHeaders), on its own line.
func (b *Builder) SummaryText(s pool.Summary) string {
	p := b.prompts
	text := p.PrinciplesHeader + " " + s.Principles + "\n" + p.PitfallsHeader + " " + s.Pitfalls
	if len(p.SummaryHeaders()) == 3 {
		text = p.FlowHeader + " " + s.FlowOfThought + "\n" + text
	}
	return text
}

// Summarize is the summarization prompt over an attempt answered by its
// summary.
func (b *Builder) Summarize(problemID, problem, attempt string, correct bool, s pool.Summary) Example {
	user := b.prompts.SummarizeRequest(problem, b.clean(attempt), correct)
	return Example{Messages: append(feedback.AuxChat(b.prompts, user), tokenizer.Message{Role: "assistant", Content: b.clean(b.SummaryText(s))}),
		TrainOn: "last", Skill: SkillSummarize, ProblemID: problemID}
}

// Reflect is the reflection prompt over an earlier attempt (an Attempt:
// text only, no outcome) answered by a critique and a new solution.
func (b *Builder) Reflect(problemID, problem string, a pool.Attempt, redo string) Example {
	a.Text = b.clean(a.Text)
	return Example{Messages: b.solveChat(pool.WithContext(problem, b.prompts.ReflectionContext(a)), redo), TrainOn: "last", Skill: SkillReflect, ProblemID: problemID}
}

// Condense is the condensing prompt over other problems' lessons answered
// by a plan.
func (b *Builder) Condense(problemID, problem string, lessons []pool.Lesson, plan string) Example {
	for i := range lessons {
		lessons[i].Principles, lessons[i].Pitfalls = b.clean(lessons[i].Principles), b.clean(lessons[i].Pitfalls)
	}
	user := b.prompts.CondenseRequest(problem, lessons)
	return Example{Messages: append(feedback.AuxChat(b.prompts, user), tokenizer.Message{Role: "assistant", Content: b.prompts.PlanHeader + " " + b.clean(plan)}),
		TrainOn: "last", Skill: SkillAbstract, ProblemID: problemID, Part: "condense"}
}

// SolveWithLessons is the solve prompt carrying related problems' lessons
// (lanpo.context: lessons) answered by a solution.
func (b *Builder) SolveWithLessons(problemID, problem string, lessons []pool.Lesson, solution string) Example {
	for i := range lessons {
		lessons[i].Principles, lessons[i].Pitfalls = b.clean(lessons[i].Principles), b.clean(lessons[i].Pitfalls)
	}
	return Example{Messages: b.solveChat(pool.WithContext(problem, b.prompts.LessonsContext(lessons)), solution),
		TrainOn: "last", Skill: SkillAbstract, ProblemID: problemID, Part: "solve-lessons"}
}

// SolveWithPlan is the solve prompt carrying a plan answered by a
// solution.
func (b *Builder) SolveWithPlan(problemID, problem, plan, solution string) Example {
	return Example{Messages: b.solveChat(pool.WithContext(problem, b.prompts.AbstractionContext(b.clean(plan))), solution),
		TrainOn: "last", Skill: SkillAbstract, ProblemID: problemID, Part: "solve"}
}
