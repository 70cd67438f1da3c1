package model

import (
	"fmt"
	"strings"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// A second copy of a model's weights that is not a model directory of its
// own — SDPO's EMA teacher in a checkpoint — is one safetensors file of the
// model's parameters in its dtype (SaveWeights, LoadWeights).

// SaveWeights writes the model's parameters to one safetensors file, in the
// model's dtype (no config or tokenizer: LoadWeights reads it back into a
// model of the same configuration).
func (m *Model) SaveWeights(path string) error {
	st, ok := gotchToST[m.DType]
	if !ok {
		return fmt.Errorf("save %s: dtype %v has no safetensors name", path, m.DType)
	}
	return writeParams(path, m.params, st)
}

// LoadWeights overwrites the model's parameters with those of a file
// SaveWeights wrote, converting dtypes; every parameter must be there with
// its shape, and nothing else.
func (m *Model) LoadWeights(path string) (err error) {
	f, err := OpenSafetensors(path)
	if err != nil {
		return err
	}
	defer f.Close()
	specs := make([]paramSpec, len(m.params))
	for i, p := range m.params {
		specs[i] = paramSpec{name: p.Name, shape: p.Tensor.MustSize()}
	}
	var names []string
	for _, t := range f.Tensors() {
		names = append(names, t.Name)
	}
	if msgs := tensorDiffs(specs, names, f.Info); len(msgs) > 0 {
		return fmt.Errorf("load %s: its tensors do not match the model's:\n  %s", path, strings.Join(msgs, "\n  "))
	}
	defer tensor.Recover("load "+path, &err)
	return csrc.NoGrad(func() error {
		for _, p := range m.params {
			b, info, err := f.Bytes(p.Name)
			if err != nil {
				return err
			}
			t, err := csrc.FromBytes(b, info.Shape, stToGotch[info.DType], m.DType, m.Device)
			if err != nil {
				return fmt.Errorf("load %s: %s: %w", path, p.Name, err)
			}
			p.Tensor.Copy_(t)
			t.MustDrop()
		}
		return nil
	})
}

// EMAFrom moves every parameter toward src's: θ ← (1 − rate)·θ + rate·θ_src,
// in place and without grad (an exponential moving average of src's
// weights, e.g. SDPO's teacher of the policy). src must be the same
// architecture (parameters in the same order and shapes); with a 16-bit
// dtype each step rounds to it.
func (m *Model) EMAFrom(src *Model, rate float64) (err error) {
	if len(src.params) != len(m.params) {
		return fmt.Errorf("EMA: %d parameters, source has %d", len(m.params), len(src.params))
	}
	defer tensor.Recover("EMA", &err)
	var sc tensor.Scope
	defer sc.Close()
	w := sc.Float(rate)
	return csrc.NoGrad(func() error {
		for i, p := range m.params {
			q := src.params[i]
			if q.Name != p.Name {
				return fmt.Errorf("EMA: parameter %d is %s, source has %s", i, p.Name, q.Name)
			}
			// θ + rate·(θ_src − θ): lerp, one kernel, exact at rate 0 and 1.
			p.Tensor.MustLerp_(sc.Keep(q.Tensor.MustDetach(false)), w)
		}
		return nil
	})
}

// Hidden is the final hidden states [B, T, H] of Forward without a cache,
// or of ForwardCheckpointed when checkpointed (then c finishes the
// backward): for losses over the vocabulary other than TokenLogProbs'.
func (m *Model) Hidden(checkpointed bool, s *tensor.Scope, ids, positions, mask *ts.Tensor) (h *ts.Tensor, c *Checkpointed, err error) {
	if checkpointed {
		return m.ForwardCheckpointed(s, ids, positions, mask)
	}
	h, err = m.Forward(s, ids, positions, mask, nil)
	return h, nil, err
}

// Clone returns a copy of the model in memory: parameters of its own with
// m's values (not requiring grad), the same configuration, dtype, device
// and attention, without reading the model's files again (SDPO's teacher
// starts as the policy). A model with LoRA adapters is refused.
func (m *Model) Clone() (c *Model, err error) {
	if m.lora != nil {
		return nil, fmt.Errorf("clone: a model with LoRA adapters is not supported")
	}
	c = &Model{Config: m.Config, Device: m.Device, DType: m.DType, rawConfig: m.rawConfig, companions: m.companions, sourceDir: m.sourceDir}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	defer tensor.Recover("clone", &err)
	src := make(map[string]*ts.Tensor, len(m.params))
	for _, p := range m.params {
		src[p.Name] = p.Tensor
	}
	err = csrc.NoGrad(func() error {
		for _, sp := range c.specs() {
			p, ok := src[sp.name]
			if !ok {
				return fmt.Errorf("clone: the model has no parameter %s", sp.name)
			}
			t := p.MustDetachCopy(false)
			t.MustRequiresGrad_(false)
			c.params = append(c.params, NamedParam{Name: sp.name, Tensor: t})
			sp.set(t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := c.finish(AttentionReference); err != nil {
		return nil, err
	}
	c.useSDPA = m.useSDPA
	return c, nil
}
