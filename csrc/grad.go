package csrc

import "runtime"

// NoGrad runs fn with autograd off and restores the previous grad mode,
// whatever it was (gotch's own NoGrad turns grad on afterwards). Grad mode
// is per OS thread, so NoGrad keeps the goroutine on one thread while it
// runs: were it to move, the mode would be restored on the wrong thread and
// the first one left with autograd off for whatever runs there next.
func NoGrad(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := SetGradEnabled(false)
	defer SetGradEnabled(prev)
	return fn()
}

// GradEnabled reports the current grad mode.
func GradEnabled() bool {
	prev := SetGradEnabled(true)
	SetGradEnabled(prev)
	return prev
}
