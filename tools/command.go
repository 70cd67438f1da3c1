package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/lanpo-rl/lanpo/internal/iocap"
)

// commandTool runs a user's program per call: argv as given (no shell),
// the arguments as JSON on stdin, its answer on stdout. It runs in a
// process group of its own, killed at the timeout with everything it
// started; stdout beyond the cap is read and dropped (a flooding program
// costs no memory), and an exit status other than 0 is a failure that
// carries the tail of its stderr. At most cap(slots) of its calls run at
// once.
type commandTool struct {
	decl  json.RawMessage
	argv  []string
	limit limits
	slots chan struct{} // max_concurrency: a call holds one while its program runs
}

func (t *commandTool) Declaration() json.RawMessage { return t.decl }

func (t *commandTool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	select { // the timeout starts once the call has its slot
	case t.slots <- struct{}{}:
		defer func() { <-t.slots }()
	case <-ctx.Done():
		return "", fmt.Errorf("cancelled")
	}
	cmd := exec.Command(t.argv[0], t.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin = bytes.NewReader(append(append([]byte(nil), args...), '\n'))
	stdout := &iocap.Head{Max: t.limit.out}
	stderr := &iocap.Tail{Max: 2 << 10}
	// Pipes of our own: the call ends when the program exits, not when
	// everything it started lets go of its output (a background child
	// would hold exec's pipes open); what is left of its group is then
	// killed and the pipes drained.
	outR, outW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return "", err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return "", fmt.Errorf("cannot start %s: %v", t.argv[0], err)
	}
	var drained sync.WaitGroup
	for _, p := range []struct {
		r *os.File
		w io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		drained.Add(1)
		go func() {
			defer drained.Done()
			io.Copy(p.w, p.r)
		}()
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(t.limit.timeout)
	defer timer.Stop()
	killed := ""
	select {
	case err = <-waited:
	case <-timer.C:
		killed = fmt.Sprintf("timed out after %s", t.limit.timeout)
	case <-ctx.Done():
		killed = "cancelled"
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it started goes too
	if killed != "" {
		<-waited
	}
	done := make(chan struct{})
	go func() { drained.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second): // a grandchild outside the group holds the pipes: stop reading
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()
	out := stdout.String()
	if killed != "" {
		return out, fmt.Errorf("%s", killed)
	}
	if err != nil {
		msg := err.Error()
		if tail, _ := stderr.Text(); tail != "" {
			msg += ": " + tail
		}
		return out, fmt.Errorf("%s", msg)
	}
	return out, nil
}
