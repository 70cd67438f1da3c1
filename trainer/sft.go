package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
)

// example is one tokenized conversation: ids and, per id, whether it is an
// assistant token the loss is computed on.
type example struct {
	ids  []int64
	loss []bool
}

// sftRun holds an SFT run's data.
type sftRun struct {
	*session
	train, eval []example
}

// RunSFT runs (or resumes) supervised fine-tuning as cfg says.
func RunSFT(ctx context.Context, cfg Config, resume string, opts RunOptions) error {
	if err := cfg.ResolveRun("sft"); err != nil {
		return ConfigError{err}
	}
	s, err := openSession(cfg, resume, "sft", opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if mp := s.m.Config.MaxPositionEmbeddings; mp > 0 && int64(cfg.SFT.MaxLen) > mp {
		return fmt.Errorf("config key sft.max_len: %d exceeds the model's max_position_embeddings %d", cfg.SFT.MaxLen, mp)
	}
	r := &sftRun{session: s}
	if r.train, err = r.loadChats(cfg.Data.Train); err != nil {
		return err
	}
	if cfg.Data.Eval != "" {
		if r.eval, err = r.loadChats(cfg.Data.Eval); err != nil {
			return err
		}
	}
	return s.loop(ctx, r.step, nil)
}

// loadChats reads {"messages": [...]} lines and tokenizes them.
func (r *sftRun) loadChats(path string) ([]example, error) {
	var out []example
	skipped, stripped := 0, 0
	err := jsonl.File(path, func(n int, line []byte) error {
		var rec struct {
			Messages []tokenizer.Message `json:"messages"`
			TrainOn  string              `json:"train_on"` // "" or "all": every assistant turn; "last": the final one
		}
		err := json.Unmarshal(line, &rec)
		if err == nil && rec.TrainOn != "" && rec.TrainOn != "all" && rec.TrainOn != "last" {
			err = fmt.Errorf(`"train_on" %q: want "all" or "last"`, rec.TrainOn)
		}
		var ex example
		if err == nil {
			// The same sanitizer as LANPO's prompts: text in a message is
			// text, never a chat-control token.
			for i := range rec.Messages {
				var k int
				rec.Messages[i].Content, k = r.tk.StripAddedTokens(rec.Messages[i].Content)
				stripped += k
			}
			ex, err = encodeChat(r.tk, rec.Messages, r.cfg.SFT.MaxLen, rec.TrainOn == "last")
		}
		if err != nil {
			if r.cfg.Data.SkipBadLines {
				skipped++
				log.Warn().Str("file", path).Int("line", n).Err(err).Msg("skipping malformed line")
				return nil
			}
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, ex)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no conversations (%d malformed lines skipped)", path, skipped)
	}
	if stripped > 0 {
		log.Warn().Str("file", path).Int("removed", stripped).Msg("removed chat-control strings (added tokens) from message contents")
	}
	return out, nil
}

// encodeChat renders a conversation with the chat template and marks the
// tokens of every assistant turn (its content and end-of-turn marker), or
// with lastOnly of the final one, for the loss. Each segment between turn
// boundaries is encoded separately, so the mask is exact; the template must
// render every prefix of the conversation as a prefix of the whole.
func encodeChat(tk *tokenizer.Tokenizer, msgs []tokenizer.Message, maxLen int, lastOnly bool) (example, error) {
	var ex example
	if len(msgs) == 0 {
		return ex, fmt.Errorf(`"messages" is missing or empty`)
	}
	full, err := tk.Chat(msgs, tokenizer.ChatOptions{})
	if err != nil {
		return ex, err
	}
	add := func(text string, loss bool) error {
		ids, err := tk.Encode(text, false)
		if err != nil {
			return err
		}
		for _, id := range ids {
			ex.ids = append(ex.ids, int64(id))
			ex.loss = append(ex.loss, loss)
		}
		return nil
	}
	done := 0 // bytes of full already encoded
	assistant, last := 0, -1
	for i, m := range msgs {
		if m.Role == "assistant" {
			last = i
		}
	}
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		assistant++
		before, err := tk.Chat(msgs[:i], tokenizer.ChatOptions{AddGenerationPrompt: true})
		if i == 0 {
			before, err = "", nil
		}
		if err != nil {
			return ex, err
		}
		after, err := tk.Chat(msgs[:i+1], tokenizer.ChatOptions{})
		if err != nil {
			return ex, err
		}
		if !strings.HasPrefix(full, after) || !strings.HasPrefix(after, before) || len(before) < done {
			return ex, fmt.Errorf("messages[%d]: the chat template does not render this conversation's prefixes as prefixes of it; cannot mask assistant turns", i)
		}
		if err := add(full[done:len(before)], false); err != nil {
			return ex, err
		}
		if err := add(after[len(before):], !lastOnly || i == last); err != nil {
			return ex, err
		}
		done = len(after)
	}
	if assistant == 0 {
		return ex, fmt.Errorf("no assistant message to learn from")
	}
	if err := add(full[done:], false); err != nil {
		return ex, err
	}
	if len(ex.ids) > maxLen {
		ex.ids, ex.loss = ex.ids[:maxLen], ex.loss[:maxLen]
	}
	return ex, nil
}

// step runs one SFT optimizer step over micro_batch_size × grad_accum
// conversations, the loss normalized by the step's assistant-token count so
// the split into micro-batches does not change the update.
func (r *sftRun) step(t *phaseTimer) (StepMetrics, error) {
	cfg := r.cfg
	var met StepMetrics
	t.Enter("data")
	n := cfg.SFT.MicroBatchSize * cfg.SFT.GradAccum
	idx := r.state.Cursor.Next(len(r.train), n)
	exs := make([]example, n)
	tokens := 0
	for i, k := range idx {
		exs[i] = r.train[k]
		tokens += countTargets(exs[i])
	}
	met.Tokens = tokens
	lr, err := optim.LR(r.state.Step, cfg.TotalSteps, cfg.Optim.WarmupSteps, cfg.Optim.LR, cfg.Optim.MinLRRatio, cfg.Optim.Schedule)
	if err != nil {
		return met, err
	}
	met.LR = lr
	t.Enter("update")
	r.opt.ZeroGrad()
	// Data parallel: this rank's share of the step's examples; the loss is
	// normalized by the whole step's target count, so gradients add up.
	lo, hi := dist.Share(len(exs), r.comm.Rank(), r.comm.Size())
	mbs := r.microBatches(exs[lo:hi])
	nmb, err := r.microBatchCount(len(mbs))
	if err != nil {
		return met, err
	}
	for i := len(mbs); i < nmb; i++ {
		if err := r.opt.SkipBackward(); err != nil {
			return met, err
		}
	}
	var loss float64
	padded, real := 0, 0
	if err := r.dropoutOn(); err != nil {
		return met, err
	}
	for i, mb := range mbs {
		r.hb.microBatches(i, len(mbs))
		l, err := r.nll(mb, float64(max(tokens, 1)), true)
		if err != nil {
			r.dropoutOff()
			return met, err
		}
		loss += l
		longest := 0
		for _, ex := range mb {
			longest = max(longest, len(ex.ids))
			real += len(ex.ids)
		}
		padded += len(mb) * longest
	}
	r.dropoutOff()
	tot, err := dist.SumFloats(r.comm, []float64{loss, float64(real), float64(padded)})
	if err != nil {
		return met, err
	}
	met.Loss = tot[0]
	met.PaddingFrac = 1 - tot[1]/math.Max(tot[2], 1)
	if met.GradNorm, err = r.opt.Apply(lr, cfg.Optim.GradClip, met.Loss); err != nil {
		return met, err
	}
	if len(r.eval) > 0 && cfg.SFT.EvalEvery > 0 && (r.state.Step+1)%cfg.SFT.EvalEvery == 0 {
		t.Enter("eval")
		if met.EvalLoss, err = r.evalLoss(); err != nil {
			return met, err
		}
	}
	return met, nil
}

// dropoutOn turns LoRA's dropout on for the step's update (lora.dropout >
// 0). Its masks come from torch's generator seeded by (seed, step, rank),
// so a resumed run draws the masks the uninterrupted one drew.
func (r *sftRun) dropoutOn() error {
	l := r.m.LoRA()
	if l == nil || l.Config.Dropout == 0 {
		return nil
	}
	l.Training = true
	return csrc.ManualSeed(int64(r.cfg.Seed)*1_000_003 + int64(r.state.Step)*1009 + int64(r.comm.Rank()))
}

// dropoutOff turns it off again (the eval loss, sampling, checkpoints).
func (r *sftRun) dropoutOff() {
	if l := r.m.LoRA(); l != nil {
		l.Training = false
	}
}

// microBatches splits a step's examples: sft.micro_batch_size each, or
// packed by length under sft.max_tokens_per_micro_batch padded tokens. The
// loss is normalized by the step's target count, so the split does not
// change the update.
func (r *sftRun) microBatches(exs []example) [][]example {
	return splitMicroBatches(exs, r.cfg.SFT.MicroBatchSize, r.cfg.SFT.MaxTokensPerMicroBatch, func(ex example) int { return len(ex.ids) })
}

func countTargets(ex example) int {
	n := 0
	for j := 1; j < len(ex.ids); j++ {
		if ex.loss[j] {
			n++
		}
	}
	return n
}

// nll returns Σ −log p over the assistant tokens of exs divided by denom,
// and with grad on, backpropagates it.
func (r *sftRun) nll(exs []example, denom float64, grad bool) (float64, error) {
	var s tensor.Scope
	defer s.Close()
	var T int64
	for _, ex := range exs {
		T = max(T, int64(len(ex.ids)))
	}
	B := int64(len(exs))
	ids, pos, targets := make([]int64, B*T), make([]int64, B*T), make([]int64, B*T)
	tmask := make([]bool, B*T)
	w := make([]float64, B*T)
	for i, ex := range exs {
		row := int64(i) * T
		for j, id := range ex.ids {
			ids[row+int64(j)], pos[row+int64(j)] = id, int64(j) // right-padded: no attention mask
			if j+1 < len(ex.ids) && ex.loss[j+1] {
				targets[row+int64(j)], tmask[row+int64(j)], w[row+int64(j)] = ex.ids[j+1], true, 1/denom
			}
		}
	}
	dev := r.m.Device
	shape := []int64{B, T}
	args := []*ts.Tensor{tensor.FromSlice(&s, ids, shape, dev), tensor.FromSlice(&s, pos, shape, dev), nil,
		tensor.FromSlice(&s, targets, shape, dev), tensor.FromSlice(&s, tmask, shape, dev)}
	lp, _, ckpt, err := r.m.TokenLogProbsMaybeCheckpointed(grad && r.cfg.Train.ActivationCheckpointing, &s, args[0], args[1], args[2], args[3], args[4], csrc.LogProbOptions{})
	if err != nil {
		return 0, err
	}
	weighted := s.Keep(lp.MustMul(tensor.FromSlice(&s, w, shape, dev), false))
	loss := s.Keep(s.Keep(weighted.MustSum(gotch.Double, false)).MustNeg(false))
	if grad {
		if err := model.Backward(loss, ckpt, r.opt.LayerDone); err != nil {
			return 0, err
		}
	}
	return tensor.Float64s(loss)[0], nil // sync: one read per micro-batch
}

// evalLoss is the mean NLL per assistant token over the eval set (each
// rank its share).
func (r *sftRun) evalLoss() (float64, error) {
	total := 0
	for _, ex := range r.eval {
		total += countTargets(ex)
	}
	var sum float64
	lo, hi := dist.Share(len(r.eval), r.comm.Rank(), r.comm.Size())
	err := csrc.NoGrad(func() error {
		for mb := range slices.Chunk(r.eval[lo:hi], r.cfg.SFT.MicroBatchSize) {
			l, err := r.nll(mb, float64(max(total, 1)), false)
			if err != nil {
				return err
			}
			sum += l
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	tot, err := dist.SumFloats(r.comm, []float64{sum})
	if err != nil {
		return 0, err
	}
	return tot[0], nil
}
