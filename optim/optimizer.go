package optim

import (
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/model"
)

// Optimizer is one optimizer step behind one call, whatever the world
// size and sharding: GRPO and SFT accumulate gradients with backward and
// call Apply once per update.
type Optimizer interface {
	// ZeroGrad starts an accumulation of gradients.
	ZeroGrad()
	// Apply reduces the accumulated gradients over the ranks (summed: each
	// rank's loss is normalized by the global count), clips them to global
	// norm maxNorm (0: no clipping), refuses the step with ErrBadLoss when
	// loss or norm is NaN/Inf (weights and state unchanged), else updates
	// at learning rate lr and leaves every rank with the same weights. It
	// returns the global norm before clipping.
	Apply(lr, maxNorm, loss float64) (norm float64, err error)
	// ApplyGroup is Apply with moment group g: g = 0 is Apply, g ≥ 1 steps
	// the same parameters with the moments of NewOptimizer's groups[g−1].
	ApplyGroup(g int, lr, maxNorm, loss float64) (norm float64, err error)
	// LayerDone is called by the checkpointed backward when decoder layer
	// layer's gradients are complete for this micro-batch (ZeRO-2
	// reduce-scatters and frees them there).
	LayerDone(layer int) error
	// SkipBackward stands for a backward this rank does not run because
	// its share of the step has fewer micro-batches than another rank's: it
	// issues the collectives that backward's LayerDone calls would have.
	SkipBackward() error
	// Updates is the number of updates done.
	Updates() int64
	// Save writes this rank's part of the state into a checkpoint
	// directory; Load reads it back, resharding by parameter name when the
	// checkpoint was written by another world size or sharding.
	Save(dir string) error
	Load(dir string) error
	// StateBytes is the memory of this rank's optimizer state (masters,
	// moments, sharded gradient accumulators).
	StateBytes() int64
	Close()
}

// NewOptimizer returns AdamW for params as dist.zero_stage asks: plain
// (every rank the whole state; gradients all-reduced in buckets), or ZeRO
// stage 1 or 2 (state sharded by rank; stage 2 shards the gradients too,
// layer by layer when layerwise, i.e. with activation checkpointing).
// groups name moment groups beside the default one (Hyper).
func NewOptimizer(params []model.NamedParam, h Hyper, c dist.Comm, zeroStage int, bucketBytes int64, layerwise bool, groups ...string) (Optimizer, error) {
	if c == nil {
		c = dist.Single()
	}
	if zeroStage == 0 {
		o, err := NewAdamW(params, h.Beta1, h.Beta2, h.Eps, h.WeightDecay, groups...)
		if err != nil {
			return nil, err
		}
		if c.Size() == 1 {
			return o, nil
		}
		return &dpAdamW{AdamW: o, c: c, bucketBytes: bucketBytes}, nil
	}
	return newZeroAdamW(params, h, c, zeroStage, bucketBytes, layerwise, groups...)
}

// AdamW in a world of one.

func (o *AdamW) LayerDone(int) error { return nil }

func (o *AdamW) SkipBackward() error { return nil }

func (o *AdamW) Updates() int64 { return o.Step }

// StateBytes counts the masters kept beside 16-bit parameters and the
// moments.
func (o *AdamW) StateBytes() int64 {
	var n int64
	for i, p := range o.params {
		n += tensorBytes(o.m[i]) + tensorBytes(o.v[i])
		for _, gr := range o.groups {
			n += tensorBytes(gr.m[i]) + tensorBytes(gr.v[i])
		}
		if o.master[i] != p.Tensor {
			n += tensorBytes(o.master[i])
		}
	}
	return n
}

func tensorBytes(t *ts.Tensor) int64 { return int64(t.Numel()) * int64(t.DType().Size()) }
