package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool use in the Qwen2.5 and Qwen3 templates (Hermes-style): the function
// declarations go into the system turn inside <tools></tools>, one JSON
// object a line; an assistant's calls follow its content as
// <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks; tool
// responses become a user turn, consecutive ones merged into one turn of
// <tool_response> blocks. The JSON is written as transformers' tojson
// writes it (pyToJSON), so declarations and arguments are kept as raw JSON
// to keep their key order.

// ToolCall is one function call of an assistant turn, in the form Hugging
// Face's and OpenAI's messages use: {"type": "function", "function":
// {"name": ..., "arguments": ...}}. The templates render only Function.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and holds its arguments.
type FunctionCall struct {
	Name string `json:"name"`
	// Arguments is JSON, normally an object, rendered with tojson in its
	// own key order. A JSON string (OpenAI's wire form,
	// "{\"city\": \"Oslo\"}") is rendered as the template renders a
	// Python str: Qwen3 writes its text as it is, Qwen2.5 writes it quoted.
	Arguments json.RawMessage `json:"arguments"`
}

// qwenToolsPrompt is the part of the system turn that declares the tools,
// from "# Tools" to the end of the turn, the same in Qwen2.5 and Qwen3.
func qwenToolsPrompt(tools []json.RawMessage) (string, error) {
	var sb strings.Builder
	sb.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for i, tool := range tools {
		js, err := pyToJSON(tool)
		if err != nil {
			return "", fmt.Errorf("tools[%d]: %w", i, err)
		}
		sb.WriteString("\n" + js)
	}
	sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	return sb.String(), nil
}

// qwenToolCall is one <tool_call> block. rawString: a JSON-string
// Arguments is written as its text (Qwen3's "is string" branch) instead of
// as a quoted JSON string (Qwen2.5, which always applies tojson).
func qwenToolCall(c ToolCall, rawString bool) (string, error) {
	args := bytes.TrimLeft(c.Function.Arguments, " \t\r\n")
	var js string
	if len(args) > 0 && args[0] == '"' && rawString {
		if err := json.Unmarshal(args, &js); err != nil {
			return "", fmt.Errorf("function %q: arguments: %w", c.Function.Name, err)
		}
	} else {
		var err error
		if js, err = pyToJSON(args); err != nil {
			return "", fmt.Errorf("function %q: arguments: %w", c.Function.Name, err)
		}
	}
	return "<tool_call>\n{\"name\": \"" + c.Function.Name + "\", \"arguments\": " + js + "}\n</tool_call>", nil
}

// writeQwenToolResponse writes msgs[i], a tool message: consecutive tool
// messages share one user turn.
func writeQwenToolResponse(sb *strings.Builder, msgs []Message, i int) {
	if i == 0 || msgs[i-1].Role != "tool" {
		sb.WriteString("<|im_start|>user")
	}
	sb.WriteString("\n<tool_response>\n" + msgs[i].Content + "\n</tool_response>")
	if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
		sb.WriteString("<|im_end|>\n")
	}
}

// checkToolUse rejects what the format cannot render: tools, tool messages
// and tool calls in a template without tool support, tool calls on other
// roles than assistant, and calls without arguments.
func checkToolUse(f chatFormat, msgs []Message, opt ChatOptions) error {
	noTools := func(what string) error {
		return fmt.Errorf("%s: the %s chat template lanpo renders has no tool use (tools, tool calls and tool messages are rendered for %s)", what, f.name, strings.Join(toolFormats(), ", "))
	}
	if len(opt.Tools) > 0 && !f.tools {
		return noTools("tools")
	}
	for i, m := range msgs {
		if m.Role == "tool" && !f.tools {
			return noTools(fmt.Sprintf("messages[%d].role %q", i, m.Role))
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		if !f.tools {
			return noTools(fmt.Sprintf("messages[%d].tool_calls", i))
		}
		if m.Role != "assistant" {
			return fmt.Errorf("messages[%d]: tool_calls on a %s message (only assistant messages make calls)", i, m.Role)
		}
		for j, c := range m.ToolCalls {
			if len(bytes.TrimSpace(c.Function.Arguments)) == 0 {
				return fmt.Errorf("messages[%d].tool_calls[%d] (%q): arguments are missing", i, j, c.Function.Name)
			}
		}
	}
	return nil
}

// toolFormats lists the families that render tool use.
func toolFormats() []string {
	var names []string
	for _, n := range ChatFormatNames() {
		if chatFormats[n].tools {
			names = append(names, n)
		}
	}
	return names
}

// ToolResponses is the text the chat template puts after an assistant turn
// that called tools, up to the next assistant turn's header: the tool
// responses (each output as a tool message's content, in order) and the
// generation prompt. A multi-turn rollout appends it, as ids, after the
// model's own end-of-turn token; only this text is rendered, never what
// the model wrote (Qwen3's template renders earlier turns differently —
// it drops their <think> — so a re-rendered trajectory would not be what
// was sampled). It is the template's own text: the rendering of a
// conversation ending in those tool messages, after the calling turn's
// end-of-turn token.
func (t *Tokenizer) ToolResponses(outputs []string, opt ChatOptions) (string, error) {
	f, err := t.format()
	if err != nil {
		return "", err
	}
	if !f.tools {
		return "", fmt.Errorf("the %s chat template has no tool use (tool responses need Qwen2.5's or Qwen3's)", f.name)
	}
	call := []ToolCall{{Type: "function", Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{}`)}}}
	msgs := []Message{{Role: "user", Content: "u"}, {Role: "assistant", Content: "a", ToolCalls: call}}
	for _, o := range outputs {
		msgs = append(msgs, Message{Role: "tool", Content: o})
	}
	opt.AddGenerationPrompt = true
	full, err := t.Chat(msgs, opt)
	if err != nil {
		return "", err
	}
	const head, end = "<|im_start|>assistant\n", "<|im_end|>" // both Qwen families
	i := strings.Index(full, head)
	j := -1
	if i >= 0 {
		j = strings.Index(full[i:], end)
	}
	if j < 0 {
		return "", fmt.Errorf("the %s chat template's rendering has no assistant turn to append tool responses after", f.name)
	}
	return full[i+j+len(end):], nil
}
