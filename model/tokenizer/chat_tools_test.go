package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// toolsFixture is testdata/chat_tools.json, written by
// scripts/ref/chat_tools_ref.py with transformers' apply_chat_template.
type toolsFixture struct {
	Transformers string
	Cases        []struct {
		Name       string
		Messages   []Message
		Tools      []json.RawMessage
		Renderings []struct {
			Template            string
			AddGenerationPrompt bool  `json:"add_generation_prompt"`
			EnableThinking      *bool `json:"enable_thinking"`
			Text                string
		}
	}
	ToJSON []struct{ In, Out string } `json:"tojson"`
}

func readToolsFixture(t *testing.T) toolsFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/chat_tools.json")
	if err != nil {
		t.Fatal(err)
	}
	var f toolsFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestChatToolsMatchTransformers compares tool-use renderings with
// transformers' apply_chat_template(messages, tools=...) byte for byte.
func TestChatToolsMatchTransformers(t *testing.T) {
	f := readToolsFixture(t)
	n := 0
	for _, c := range f.Cases {
		for _, r := range c.Renderings {
			n++
			name := fmt.Sprintf("%s/%s/agp=%v", r.Template, c.Name, r.AddGenerationPrompt)
			if r.EnableThinking != nil {
				name += fmt.Sprintf("/thinking=%v", *r.EnableThinking)
			}
			t.Run(name, func(t *testing.T) {
				tk := load(t, r.Template)
				got, err := tk.Chat(c.Messages, ChatOptions{AddGenerationPrompt: r.AddGenerationPrompt, EnableThinking: r.EnableThinking, Tools: c.Tools})
				if err != nil {
					t.Fatal(err)
				}
				if got != r.Text {
					t.Fatalf("transformers %s\n got  %q\n want %q", f.Transformers, got, r.Text)
				}
			})
		}
	}
	if n < 100 {
		t.Fatalf("%d renderings", n)
	}
}

// TestPyToJSON compares pyToJSON with transformers' tojson of json.loads.
func TestPyToJSON(t *testing.T) {
	f := readToolsFixture(t)
	if len(f.ToJSON) < 10 {
		t.Fatalf("%d rows", len(f.ToJSON))
	}
	for i, c := range f.ToJSON {
		got, err := pyToJSON([]byte(c.In))
		if err != nil {
			t.Fatalf("row %d %q: %v", i, c.In, err)
		}
		if got != c.Out {
			t.Fatalf("row %d %q:\n got  %q\n want %q", i, c.In, got, c.Out)
		}
	}
	for _, bad := range []string{``, `{"a": 1,}`, `{"a": 1} {}`, `[1`, `{'a': 1}`} {
		if _, err := pyToJSON([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Python's repr of floats, as python3 prints them.
func TestPyFloatRepr(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", -2.5: "-2.5", 0.1: "0.1", 1e-4: "0.0001", 1.5e-5: "1.5e-05",
		1e16: "1e+16", 1e15: "1000000000000000.0", 123.456e20: "1.23456e+22", 2.2250738585072014e-308: "2.2250738585072014e-308",
		1.0 / 3: "0.3333333333333333", 9999999999999998: "9999999999999998.0",
	} {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
}

func TestChatToolErrors(t *testing.T) {
	call := []ToolCall{{Type: "function", Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{"x": 1}`)}}}
	tools := []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "f"}}`)}
	user := Message{Role: "user", Content: "Q"}
	cases := []struct {
		tok  string
		msgs []Message
		opt  ChatOptions
		want string
	}{
		{"llama3_1", []Message{user}, ChatOptions{Tools: tools}, "llama3 chat template"},
		{"llama3_1", []Message{user, {Role: "tool", Content: "r"}}, ChatOptions{}, `messages[1].role "tool": the llama3`},
		{"llama3_1", []Message{user, {Role: "assistant", ToolCalls: call}}, ChatOptions{}, "messages[1].tool_calls: the llama3"},
		{"qwen3", []Message{{Role: "user", Content: "Q", ToolCalls: call}}, ChatOptions{}, "tool_calls on a user message"},
		{"qwen3", []Message{user, {Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f"}}}}}, ChatOptions{}, `tool_calls[0] ("f"): arguments are missing`},
		{"qwen2_5", []Message{user, {Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{x}`)}}}}}, ChatOptions{}, "messages[1].tool_calls[0]"},
		{"qwen2_5", []Message{user}, ChatOptions{Tools: []json.RawMessage{json.RawMessage(`{`)}}, "tools[0]"},
		{"qwen3", []Message{{Role: "ipython", Content: "r"}}, ChatOptions{}, "want system, user, assistant or tool"},
	}
	for i, c := range cases {
		_, err := load(t, c.tok).Chat(c.msgs, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: err = %v, want it to contain %q", i, err, c.want)
		}
	}
	// An empty tools list is no tools, as the template's "if tools".
	tk := load(t, "llama3_1")
	if _, err := tk.Chat([]Message{user}, ChatOptions{Tools: []json.RawMessage{}}); err != nil {
		t.Fatal(err)
	}
}

// A message with tool calls survives a JSON round trip with its
// arguments' key order, so stored trajectories render as they were made.
func TestToolCallJSONKeepsKeyOrder(t *testing.T) {
	in := `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"z":1,"a":[2.50,"é"]}}}]}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	block, err := qwenToolCall(m.ToolCalls[0], true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": [2.5, \"é\"]}}\n</tool_call>"; block != want {
		t.Fatalf("got %q\nwant %q", block, want)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"arguments":{"z":1,"a":[2.50,"é"]}`) {
		t.Fatalf("marshalled %s", out)
	}
}

// TestToolResponsesMatchTransformers: the text a rollout appends after an
// assistant turn that called tools is the end of transformers' rendering of
// the conversation with those tool messages (every fixture case that ends
// with tool messages after such a turn, with the generation prompt), and
// starts right after the model's end-of-turn token.
func TestToolResponsesMatchTransformers(t *testing.T) {
	f := readToolsFixture(t)
	n := 0
	for _, c := range f.Cases {
		k := len(c.Messages)
		for k > 0 && c.Messages[k-1].Role == "tool" {
			k--
		}
		if k == len(c.Messages) || k == 0 || c.Messages[k-1].Role != "assistant" || len(c.Messages[k-1].ToolCalls) == 0 {
			continue
		}
		var outputs []string
		for _, m := range c.Messages[k:] {
			outputs = append(outputs, m.Content)
		}
		for _, r := range c.Renderings {
			if !r.AddGenerationPrompt {
				continue
			}
			tk := load(t, r.Template)
			got, err := tk.ToolResponses(outputs, ChatOptions{EnableThinking: r.EnableThinking, Tools: c.Tools})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(r.Text, got) || !strings.HasSuffix(r.Text[:len(r.Text)-len(got)], "<|im_end|>") {
				t.Errorf("%s/%s: appended %q is not the end of transformers' %q after an end-of-turn token", r.Template, c.Name, got, r.Text)
			}
			n++
		}
	}
	if n < 4 {
		t.Fatalf("%d renderings checked", n)
	}
	if _, err := load(t, "llama3_1").ToolResponses([]string{"x"}, ChatOptions{}); err == nil || !strings.Contains(err.Error(), "llama3") {
		t.Errorf("llama3: %v", err)
	}
}
