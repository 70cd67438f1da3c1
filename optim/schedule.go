package optim

import (
	"fmt"
	"math"
)

// LR returns the learning rate for update number step (0-based) of total:
// linear warmup over warmup steps, peak·(step+1)/warmup (so the first
// update already moves), then constant or cosine decay that reaches
// minRatio·peak at the last step. A cosine schedule with a single step
// after warmup stays at peak: there is no decay to spread over one step.
// It equals torch's LinearLR then CosineAnnealingLR joined by SequentialLR
// (optim/testdata/optim_ref.json).
func LR(step, total, warmup int, peak, minRatio float64, schedule string) (float64, error) {
	if step < warmup {
		return peak * float64(step+1) / float64(warmup), nil
	}
	switch schedule {
	case "constant":
		return peak, nil
	case "cosine":
		span := total - warmup
		if span <= 1 {
			return peak, nil
		}
		progress := float64(step-warmup) / float64(span-1)
		return peak * (minRatio + (1-minRatio)*0.5*(1+math.Cos(math.Pi*progress))), nil
	}
	return 0, fmt.Errorf("lr_schedule %q: want constant or cosine", schedule)
}
