package csrc

import (
	"errors"
	"runtime"
	"testing"
)

func TestNoGradRestoresAndNests(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !GradEnabled() {
		t.Fatal("grad mode starts off")
	}
	errInner := errors.New("inner")
	err := NoGrad(func() error {
		if GradEnabled() {
			t.Fatal("grad on inside NoGrad")
		}
		return NoGrad(func() error {
			if GradEnabled() {
				t.Fatal("grad on inside nested NoGrad")
			}
			return errInner
		})
	})
	if err != errInner {
		t.Fatalf("err = %v", err)
	}
	if !GradEnabled() {
		t.Fatal("grad mode not restored")
	}
}
