package model

import (
	"fmt"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Activation checkpointing per decoder layer. A normal training forward
// keeps every layer's intermediates (attention scores, MLP activations) for
// backward; a checkpointed one keeps only each layer's input [B, T, H] and
// recomputes one layer at a time during backward:
//
//  1. forward without grad through the embedding and the layers, keeping
//     each layer's input and the last layer's output;
//  2. the final norm (and, by the caller, the head and the loss) with grad
//     from the last output made a leaf; the caller backpropagates the loss
//     into it;
//  3. Backward: for the last layer to the first, recompute the layer with
//     grad from its kept input and backpropagate the incoming gradient
//     through it (its parameters accumulate their gradients, its input gets
//     the gradient for the layer below); then the embedding.
//
// Each layer's parameters have their complete gradients as soon as its turn
// is done, so a caller can act on them there (a sharded optimizer can
// reduce-scatter and free them, layer by layer).

// Checkpointed is a checkpointed forward pass, waiting for its backward.
type Checkpointed struct {
	m       *Model
	ids     *ts.Tensor
	in      *layerInputs
	inputs  []*ts.Tensor // each layer's input (no grad), owned by the forward's scope
	last    *ts.Tensor   // the last layer's output as a leaf that requires grad
	started bool
}

// ForwardCheckpointed is Forward for training with activation
// checkpointing: it returns the final hidden states [B, T, H] (differentiable
// in the final norm and the last layer's output) and the Checkpointed whose
// Backward finishes backpropagation through the layers once the caller has
// backpropagated its loss. Tensors belong to s.
func (m *Model) ForwardCheckpointed(s *tensor.Scope, ids, positions, mask *ts.Tensor) (h *ts.Tensor, c *Checkpointed, err error) {
	defer tensor.Recover("checkpointed forward", &err)
	c = &Checkpointed{m: m, ids: ids}
	err = csrc.NoGrad(func() error {
		c.in = &layerInputs{cfg: m.Config, sdpa: m.useSDPA, rope: m.rope, pos: positions}
		if mask != nil {
			c.in.allowed = attentionMask(s, mask, ids.MustSize()[1])
		}
		x := s.Keep(ts.MustEmbedding(m.Embed, ids, -1, false, false))
		for _, l := range m.Layers {
			c.inputs = append(c.inputs, x)
			x, _ = layerStep(s, x, nil, func(ls *tensor.Scope, x, _ *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
				return l.forwardWhole(ls, c.in, x), nil
			})
		}
		c.last = s.Keep(x.MustDetach(false))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	c.last.MustRequiresGrad_(true)
	return rmsNorm(s, c.last, m.Norm, m.Config.RMSNormEps), c, nil
}

// TokenLogProbsCheckpointed is TokenLogProbs with activation checkpointing:
// after backpropagating a loss of its outputs, call c.Backward.
func (m *Model) TokenLogProbsCheckpointed(s *tensor.Scope, ids, positions, mask, targets, targetMask *ts.Tensor, opt csrc.LogProbOptions) (logp, entropy *ts.Tensor, c *Checkpointed, err error) {
	defer tensor.Recover("token log-probs", &err)
	h, c, err := m.ForwardCheckpointed(s, ids, positions, mask)
	if err != nil {
		return nil, nil, nil, err
	}
	logp, entropy, err = m.logProbs(s, h, targets, targetMask, opt)
	return logp, entropy, c, err
}

// TokenLogProbsMaybeCheckpointed is TokenLogProbsCheckpointed when
// checkpointed, else TokenLogProbs (and c is nil): the one switch every
// caller with a checkpointing setting makes.
func (m *Model) TokenLogProbsMaybeCheckpointed(checkpointed bool, s *tensor.Scope, ids, positions, mask, targets, targetMask *ts.Tensor, opt csrc.LogProbOptions) (logp, entropy *ts.Tensor, c *Checkpointed, err error) {
	if checkpointed {
		return m.TokenLogProbsCheckpointed(s, ids, positions, mask, targets, targetMask, opt)
	}
	logp, entropy, err = m.TokenLogProbs(s, ids, positions, mask, targets, targetMask, opt)
	return logp, entropy, nil, err
}

// Backward backpropagates the gradient the caller's loss left on the last
// layer's output through every layer, last to first, recomputing each from
// its kept input, then through the embedding. onLayer (may be nil) is
// called with each layer's index once that layer's parameters have their
// complete gradients. It must run with grad mode on, once.
func (c *Checkpointed) Backward(onLayer func(layer int) error) (err error) {
	defer tensor.Recover("checkpointed backward", &err)
	if c.started {
		return fmt.Errorf("checkpointed backward: called twice")
	}
	c.started = true
	grad := c.last.MustGrad(false)
	if !grad.MustDefined() {
		return fmt.Errorf("checkpointed backward: the loss did not reach the layers (backpropagate it first)")
	}
	for l := len(c.m.Layers) - 1; l >= 0; l-- {
		var ls tensor.Scope
		x := ls.Keep(c.inputs[l].MustDetach(false))
		x.MustRequiresGrad_(true)
		y := c.m.Layers[l].forwardWhole(&ls, c.in, x)
		err := csrc.Backward(y, grad)
		grad.MustDrop()
		if err != nil {
			ls.Close()
			return fmt.Errorf("layer %d: %w", l, err)
		}
		grad = x.MustGrad(false)
		ls.Close()
		if onLayer != nil {
			if err := onLayer(l); err != nil {
				grad.MustDrop()
				return err
			}
		}
	}
	if !c.m.Embed.MustRequiresGrad() {
		grad.MustDrop() // a frozen embedding (LoRA): nothing below the layers learns
		return nil
	}
	var es tensor.Scope
	defer es.Close()
	e := es.Keep(ts.MustEmbedding(c.m.Embed, c.ids, -1, false, false))
	err = csrc.Backward(e, grad)
	grad.MustDrop()
	return err
}

// Backward runs autograd from a scalar loss, errors instead of panics; with
// activation checkpointing (ckpt non-nil) it continues through the layers,
// calling layerDone (may be nil) as each layer's gradients are complete.
func Backward(l *ts.Tensor, ckpt *Checkpointed, layerDone func(int) error) (err error) {
	defer tensor.Recover("backward", &err)
	l.MustBackward()
	if ckpt != nil {
		return ckpt.Backward(layerDone)
	}
	return nil
}
