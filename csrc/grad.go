package csrc

// NoGrad runs fn with autograd off and restores the previous grad mode,
// whatever it was (gotch's own NoGrad turns grad on afterwards). Grad mode
// is per OS thread: call it on the thread that does the torch work.
func NoGrad(fn func() error) error {
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
