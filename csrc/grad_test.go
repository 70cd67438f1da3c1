package csrc

import (
	"errors"
	"runtime"
	"syscall"
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

// NoGrad called from a goroutine that is not locked to its thread must
// still run on one thread: grad mode set on one thread and restored on
// another would leave the first with autograd off.
func TestNoGradStaysOnOneThread(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	for i := 0; i < 4; i++ { // competition for the Ps, so goroutines move
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	for round := 0; round < 20; round++ {
		var tids []int
		NoGrad(func() error {
			for i := 0; i < 200; i++ {
				tids = append(tids, syscall.Gettid())
				if i%50 == 0 {
					runtime.GC()
				}
				runtime.Gosched()
			}
			return nil
		})
		for _, id := range tids {
			if id != tids[0] {
				t.Fatalf("round %d: NoGrad's function ran on threads %d and %d", round, tids[0], id)
			}
		}
	}
}
