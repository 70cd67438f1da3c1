package rl

import (
	"encoding/json"
	"strings"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// PromptFormat is how a problem becomes the chat the policy solves
// (data.system_prompt, data.prompt_template, rollout.enable_thinking).
type PromptFormat struct {
	SystemPrompt   string
	PromptTemplate string // {problem} replaced
	EnableThinking *bool
	// Tools are the declarations of the tools the policy may call, in the
	// system turn (tools.Set.Declarations; nil: none).
	Tools []json.RawMessage
}

// SolveIDs renders a problem text (the problem, or the problem with a
// context block) as the chat the policy solves, with the assistant header.
func (f PromptFormat) SolveIDs(tk *tokenizer.Tokenizer, problem string) ([]int64, error) {
	return f.UserIDs(tk, f.User(problem))
}

// User is the user message that asks for a problem (data.prompt_template).
func (f PromptFormat) User(problem string) string {
	return strings.ReplaceAll(f.PromptTemplate, "{problem}", problem)
}

// UserIDs renders a user message as it is (after the system prompt, if
// any) with the assistant header.
func (f PromptFormat) UserIDs(tk *tokenizer.Tokenizer, user string) ([]int64, error) {
	var msgs []tokenizer.Message
	if f.SystemPrompt != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: f.SystemPrompt})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: user})
	ids, err := tk.ChatIDs(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: f.EnableThinking, Tools: f.Tools})
	return tokenizer.Int64s(ids), err
}
