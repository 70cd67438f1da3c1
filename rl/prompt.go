package rl

import (
	"strings"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// PromptFormat is how a problem becomes the chat the policy solves
// (data.system_prompt, data.prompt_template, rollout.enable_thinking).
type PromptFormat struct {
	SystemPrompt   string
	PromptTemplate string // {problem} replaced
	EnableThinking *bool
}

// SolveIDs renders a problem text (the problem, or the problem with a
// context block) as the chat the policy solves, with the assistant header.
func (f PromptFormat) SolveIDs(tk *tokenizer.Tokenizer, problem string) ([]int64, error) {
	var msgs []tokenizer.Message
	if f.SystemPrompt != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: f.SystemPrompt})
	}
	user := strings.ReplaceAll(f.PromptTemplate, "{problem}", problem)
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: user})
	ids, err := tk.ChatIDs(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: f.EnableThinking})
	return tokenizer.Int64s(ids), err
}
