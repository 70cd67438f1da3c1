package feedback

import (
	"fmt"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// modelText prepares text a model wrote for a prompt: added-token strings
// removed (counted), cut to lanpo.max_context_tokens (counted).
func (f *Builder) modelText(text string) string {
	text, n := f.tk.StripAddedTokens(text)
	f.met.SpecialRemoved += n
	text, cut := clipText(f.tk, text, f.cfg.MaxContextTokens)
	if cut {
		f.met.ContextTruncated++
	}
	return text
}

// tokenCount is the length of text in tokens.
func (f *Builder) tokenCount(text string) int {
	ids, err := f.tk.Encode(strings.ToValidUTF8(text, "\uFFFD"), false)
	if err != nil {
		return len(text) // cannot happen on valid UTF-8; bytes are still a bound
	}
	return len(ids)
}

// clipText cuts text to at most n tokens, keeping its beginning and its end
// around a marker (an attempt's setup and its final answer both matter),
// and reports whether it cut. Invalid UTF-8 (a response decoded from a
// cut byte-level token) becomes U+FFFD first, so the cap always applies.
func clipText(tk *tokenizer.Tokenizer, text string, n int) (string, bool) {
	text = strings.ToValidUTF8(text, "\uFFFD")
	ids, err := tk.Encode(text, false)
	if err != nil {
		panic(fmt.Sprintf("clipText: encoding valid UTF-8 failed: %v", err))
	}
	if len(ids) <= n {
		return text, false
	}
	const marker = "\n[…]\n"
	head := (n - 4) / 2
	tail := n - 4 - head
	return tk.Decode(ids[:head], false) + marker + tk.Decode(ids[len(ids)-tail:], false), true
}

// generate completes, for each user message, an assistant turn that starts
// with the given prefix (not returned), with no grad, at
// lanpo.aux_temperature (0: greedy), for at most maxNew tokens, and cuts
// each text before the first stop string. indexes key each item's random
// stream, with the step and purpose.
func (f *Builder) generate(users, prefixes []string, indexes []int, maxNew int, stops []string, purpose string) ([]string, error) {
	res, err := f.sample(users, prefixes, indexes, model.SamplingParams{MaxNewTokens: maxNew, StopStrings: stops}, purpose)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(users))
	for _, s := range res {
		out[s.Prompt] = cutAtStops(f.tk.Decode(tokenizer.Ints(s.IDs), true), stops)
	}
	return out, nil
}

// cutAtStops is text before the first of stops, trimmed.
func cutAtStops(text string, stops []string) string {
	for _, st := range stops {
		if i := strings.Index(text, st); i >= 0 {
			text = text[:i]
		}
	}
	return strings.TrimSpace(text)
}

// sample runs one auxiliary generation: for each user message, an
// assistant turn starting with its prefix, with no grad, at
// lanpo.aux_temperature (0: greedy), ended by any special token (not
// before one real token: a weak model's most likely first token is often
// one of them, which would leave every text empty). p brings the budget,
// the stop strings or the segments; indexes key each item's random stream,
// with the step and purpose. Tokens are counted as prefilled and
// generated.
func (f *Builder) sample(users, prefixes []string, indexes []int, p model.SamplingParams, purpose string) ([]model.Sample, error) {
	reqs := make([]model.Request, len(users))
	for i, u := range users {
		ids, err := f.tk.ChatIDs(AuxChat(f.prompts, u), tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: f.format.EnableThinking})
		if err != nil {
			return nil, err
		}
		pre, err := f.tk.Encode(prefixes[i], false)
		if err != nil {
			return nil, err
		}
		reqs[i] = model.Request{PromptIDs: tokenizer.Int64s(append(ids, pre...)), Samples: 1}
		f.tokens.prefilled += len(ids) + len(pre)
	}
	p.Temperature, p.TopP, p.MinNewTokens, p.StopIDs = f.cfg.AuxTemperature, 1, 1, f.stopIDs
	p.Seed = rl.DrawKey(f.step, rl.StreamAux, purpose) ^ f.seed
	opt := f.genOpt
	opt.Detokenize = func() func(int64) string {
		s := f.tk.NewStream(true)
		return func(id int64) string { return s.Add(int(id)) }
	}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = f.m.GenerateAt(reqs, indexes, p, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, s := range res {
		f.tokens.generated += len(s.IDs)
	}
	return res, nil
}

// AuxChat is an auxiliary prompt's chat: the prompts' system message, if
// any, and the user message.
func AuxChat(p pool.Prompts, user string) []tokenizer.Message {
	var msgs []tokenizer.Message
	if p.System != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: p.System})
	}
	return append(msgs, tokenizer.Message{Role: "user", Content: user})
}
