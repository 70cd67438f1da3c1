package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// Loop joins a Set to the rollout engine: a sample whose assistant turn
// holds tool calls parks at the turn's end-of-turn token; its calls run
// (all of a turn's calls at once, beside the other parked samples' and
// while the engine decodes the other rows); their outputs, rendered by the
// chat template as tool responses up to the next assistant header, are
// appended as ids and the sample goes on. The trajectory is the sampled
// ids and the appended ids, never re-rendered or re-tokenized; only the
// appended tool responses are rendered (tokenizer.ToolResponses).
//
// Limits: MaxTurns tool turns per trajectory (a turn that calls a tool
// past it ends the trajectory there, EndReason "max_turns", its calls not
// run); MaxOutputTokens per call's output (cut, saying so); the token
// budget (max_new_tokens counts the appended ids: a response that would
// pass it ends with finish reason "length", the engine's).
type Loop struct {
	Set             *Set
	Tok             *tokenizer.Tokenizer
	Chat            tokenizer.ChatOptions // the run's template options (EnableThinking)
	EndOfTurn       []int64               // the ids that end an assistant turn (the EOS ids)
	MaxTurns        int
	MaxOutputTokens int
	// Format is how the model calls: FormatHermes (the chat template's
	// <tool_call> blocks, the default) or FormatFenced (tool-integrated
	// reasoning: a ```python block runs when its fence closes, and its
	// output is appended as an ```output block; python only).
	Format string
	// Lockstep: the engine waits for every parked sample's answer at each
	// look (model.Turns.Lockstep): reproducible whatever the tools' timing,
	// at the price of a slow tool stalling the batch.
	Lockstep bool

	callEnd int64 // the </tool_call> id, −1 when the tokenizer has none (then text is searched)
	mu      sync.Mutex
	traj    map[[2]int]*Trajectory
	ctx     context.Context
}

// Trajectory is what happened to one sample's tool calls.
type Trajectory struct {
	Turns       int     // tool turns (parks)
	Calls       int     // calls run or answered with an error
	Errors      int     // calls that failed (bad call, unknown tool, bad arguments, the tool's failure)
	ToolSeconds float64 // the calls' wall time, summed
	EndReason   string  // "max_turns" when a tool turn past MaxTurns ended it; "" otherwise
	turnStart   int     // where the current assistant turn starts in the sample's ids
}

// Start prepares a generation's bookkeeping and returns the engine's
// Turns for it; ctx cancels the tools still running when it ends.
func (l *Loop) Start(ctx context.Context, rows int) (*model.Turns, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	l.callEnd = -1
	if id, ok := l.Tok.TokenID("</tool_call>"); ok {
		l.callEnd = int64(id)
	}
	l.traj = map[[2]int]*Trajectory{}
	l.ctx = ctx
	resumes := make(chan model.Resume, max(rows, 1)) // a sample parks once at a time: sends never block
	return &model.Turns{ParkIf: l.parkIf, Parked: func(s model.Sample) { go l.answer(s, resumes) }, Resumes: resumes, Lockstep: l.Lockstep}, nil
}

// Check reports whether the loop can run: its tools, tokenizer and
// end-of-turn ids set, its format known, and the chat template able to
// render tool responses (hermes) or the python tool alone (fenced).
func (l *Loop) Check() error {
	if l.Set == nil || l.Tok == nil || len(l.EndOfTurn) == 0 {
		return fmt.Errorf("tools: a loop needs its tools, the tokenizer and the end-of-turn ids")
	}
	switch l.Format {
	case "", FormatHermes:
		if _, err := l.Tok.ToolResponses([]string{"x"}, l.Chat); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
	case FormatFenced:
		if _, ok := l.Set.tools[Python]; !ok || len(l.Set.names) != 1 {
			return fmt.Errorf("tools: the fenced format runs the python tool alone (tools: %s)", strings.Join(l.Set.names, ", "))
		}
	default:
		return fmt.Errorf("tools: format %q: want %s or %s", l.Format, FormatHermes, FormatFenced)
	}
	return nil
}

// Describe names the loop's tools, format and limits (an evaluation's
// record: a resumed one must match).
func (l *Loop) Describe() string {
	format := l.Format
	if format == "" {
		format = FormatHermes
	}
	decl, _ := json.Marshal(l.Set.Declarations())
	return fmt.Sprintf("%s; max_turns %d; max_output_tokens %d; %s", format, l.MaxTurns, l.MaxOutputTokens, decl)
}

// Declarations are the tools' entries for the prompt's system turn.
// (none in the fenced format, which the prompt's own words ask for).
func (l *Loop) Declarations() []json.RawMessage {
	if l.Format == FormatFenced {
		return nil
	}
	return l.Set.Declarations()
}

// Trajectory returns what happened to sample (prompt, index) of the last
// Start's generation (zero when it called nothing).
func (l *Loop) Trajectory(prompt, index int) Trajectory {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.traj[[2]int{prompt, index}]; t != nil {
		return *t
	}
	return Trajectory{}
}

func (l *Loop) get(k [2]int) *Trajectory {
	t := l.traj[k]
	if t == nil {
		t = &Trajectory{}
		l.traj[k] = t
	}
	return t
}

// parkIf: the sample's latest token ends an assistant turn that holds a
// complete tool call (the fenced format: closes a ```python block), and
// the trajectory has tool turns left (else it ends there: "max_turns").
func (l *Loop) parkIf(prompt, index int, ids []int64) bool {
	if !l.mayEndCall(ids[len(ids)-1]) {
		return false // the cheap test first
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.get([2]int{prompt, index})
	if !l.holdsCall(ids[t.turnStart:]) {
		return false
	}
	if t.Turns >= l.MaxTurns {
		t.EndReason = "max_turns"
		return false
	}
	return true
}

// mayEndCall: tok can end a turn's call — an end-of-turn id (hermes), a
// token holding a backtick or ending a line (fenced).
func (l *Loop) mayEndCall(tok int64) bool {
	if l.Format == FormatFenced {
		last := l.Tok.Decode([]int{int(tok)}, false)
		return strings.Contains(last, "`") || strings.HasSuffix(last, "\n")
	}
	return slices.Contains(l.EndOfTurn, tok)
}

// holdsCall: a turn's ids hold a complete call — a <tool_call> block
// (hermes), or end by closing a ```python block (fenced).
func (l *Loop) holdsCall(turn []int64) bool {
	if l.Format == FormatFenced {
		_, ok := closedPython(l.Tok.Decode(tokenizer.Ints(turn), false))
		return ok
	}
	if l.callEnd >= 0 && !slices.Contains(turn, l.callEnd) {
		return false // the cheap test first
	}
	return callBlock.MatchString(l.Tok.Decode(tokenizer.Ints(turn), false)) // a </tool_call> with no <tool_call> before it is not a call
}

// answer runs a parked sample's calls and resumes it with their responses.
func (l *Loop) answer(s model.Sample, resumes chan<- model.Resume) {
	k := [2]int{s.Prompt, s.Index}
	l.mu.Lock()
	start := l.get(k).turnStart
	l.mu.Unlock()
	text := l.Tok.Decode(tokenizer.Ints(s.IDs[start:]), false)
	var calls []Call
	if l.Format == FormatFenced {
		calls = []Call{fencedCall(text)}
	} else {
		calls = l.Set.ParseCalls(text)
	}
	results := l.Set.Run(l.ctx, calls)
	outputs := make([]string, len(results))
	failed, secs := 0, 0.0
	for i, r := range results {
		outputs[i] = l.capTokens(r.Output)
		if r.Failed {
			failed++
		}
		secs += r.Seconds
	}
	rs := model.Resume{Prompt: s.Prompt, Index: s.Index}
	var err error
	if l.Format == FormatFenced {
		text = fencedOutput(text, outputs[0])
	} else {
		text, err = l.Tok.ToolResponses(outputs, l.Chat)
	}
	if err == nil {
		var ids []int
		if ids, err = l.Tok.Encode(text, false); err == nil {
			rs.Append = tokenizer.Int64s(ids)
		}
	}
	if err != nil { // checked at Start: not expected
		rs.Finish = "error"
	}
	l.mu.Lock()
	t := l.get(k)
	t.Turns++
	t.Calls += len(calls)
	t.Errors += failed
	t.ToolSeconds += secs
	t.turnStart = len(s.IDs) + len(rs.Append)
	l.mu.Unlock()
	resumes <- rs
}

// capTokens cuts an output to MaxOutputTokens tokens, saying so.
func (l *Loop) capTokens(out string) string {
	if l.MaxOutputTokens <= 0 {
		return out
	}
	ids, err := l.Tok.Encode(out, false)
	if err != nil || len(ids) <= l.MaxOutputTokens {
		return out
	}
	return l.Tok.Decode(ids[:l.MaxOutputTokens], false) + fmt.Sprintf("\n…[output cut at %d tokens]", l.MaxOutputTokens)
}

// OwnIDs are a trajectory's sampled ids: its ids without the appended
// ranges (model.Sample.Appended).
func OwnIDs(ids []int64, appended [][2]int) []int64 {
	if len(appended) == 0 {
		return ids
	}
	out := make([]int64, 0, len(ids))
	at := 0
	for _, a := range appended {
		out = append(out, ids[at:a[0]]...)
		at = a[1]
	}
	return append(out, ids[at:]...)
}

// The formats a model may call tools in (Loop.Format).
const (
	FormatHermes = "hermes" // the Qwen templates' <tool_call> blocks, answered as <tool_response> turns
	FormatFenced = "fenced" // ```python blocks, answered with ```output blocks in the same turn
)

// closedPython is the code of the last ```python block of text when that
// block's closing fence ends the text (spaces and newlines after it
// aside).
func closedPython(text string) (string, bool) {
	i := strings.LastIndex(text, "```python")
	if i < 0 {
		return "", false
	}
	rest := text[i+len("```python"):]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 || strings.TrimSpace(rest[:nl]) != "" {
		return "", false
	}
	body := strings.TrimRight(rest[nl+1:], " \t\n")
	if !strings.HasSuffix(body, "```") {
		return "", false
	}
	code := strings.TrimSuffix(body, "```")
	if strings.Contains(code, "```") { // the block closed earlier
		return "", false
	}
	return strings.TrimRight(code, "\n"), true
}

// fencedCall is the python call of a turn that ends by closing a
// ```python block.
func fencedCall(text string) Call {
	code, ok := closedPython(text)
	if !ok {
		return Call{Name: Python, Err: "no closed ```python block"}
	}
	args, _ := json.Marshal(map[string]string{"code": code})
	return Call{Name: Python, Args: args}
}

// fencedOutput is what follows a closed ```python block: its output in an
// ```output block (the tool-integrated-reasoning convention).
func fencedOutput(text, out string) string {
	lead := ""
	if !strings.HasSuffix(text, "\n") {
		lead = "\n"
	}
	return lead + "```output\n" + strings.TrimRight(out, "\n") + "\n```\n"
}

// AppendedTokens is how many ids the appended ranges (model.Sample.Appended)
// cover.
func AppendedTokens(appended [][2]int) int {
	n := 0
	for _, a := range appended {
		n += a[1] - a[0]
	}
	return n
}
