// Package modeltest loads models for tests.
package modeltest

import (
	"runtime"
	"testing"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
)

// Load locks the test's goroutine to its OS thread (torch work runs on
// one thread) and loads the Hugging Face directory dir's model on the CPU
// and its tokenizer; the model is closed and the thread unlocked when the
// test ends.
func Load(t testing.TB, dir string) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tk
}
