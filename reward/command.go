package reward

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/lanpo-rl/lanpo/internal/iocap"
)

// Command is a reward program (reward.kind: command). It is started on
// the first Score, not by New, so a config check or a run that never
// scores starts nothing: reward.command's argv is run as it is, never
// through a shell, in a process group of its own. It stays up and scores
// batch after batch over its stdin and stdout.
//
// # Protocol
//
// JSON lines in UTF-8: per batch of at most reward.batch_size rollouts,
// one request line, then one reply line:
//
//	→ {"requests": [{"problem": {…}, "id": "gsm8k-17", "answer": "42", "prompt": "…", "response": "…", "truncated": false}, …]}
//	← {"verdicts": [{"reward": 1.0, "correct": true, "reason": "matched"}, …]}
//
// A request's fields are Request's: problem is the data file's record
// with every field; answer is left out where the data has none. Newlines
// inside strings are escaped, so a request is exactly one line. The reply
// has one verdict per request, in the same order: "reward" is required
// and must be a finite number; "correct" (default false) counts the
// rollout as solved; "reason" (optional) goes to the rollouts log; other
// fields are ignored. A program that cannot score a batch but can go on
// answers {"error": "why"} instead. Blank lines on stdout are skipped;
// every other line is a reply, so diagnostics go to stderr, whose last
// 4 KB are quoted in errors. At EOF on stdin the program should exit
// (lanpo itself ended). testdata/remote/exact_match.py is a complete
// program.
//
// # Failures
//
// No reply within reward.timeout (writing the request included, and for
// the first batch the program's start, which loading a model makes long),
// an exit, a reply that does not parse, the wrong number of verdicts, a
// missing or non-finite reward: the program's process group is killed
// (SIGKILL) and reaped, and the next batch starts a fresh program. An
// {"error"} reply leaves it running. Either way the batch fails under
// reward.on_error: fail ends Score with an error naming the program, the
// batch, what happened and the stderr tail; zero gives the batch's
// rollouts reward 0 with Verdict.Err set. A cancelled context kills the
// program too and ends Score with the context's error, whatever
// on_error says. Close kills the group: the program gets no chance to
// clean up.
//
// Score and Close may be called from different goroutines; calls are
// serialized.
type Command struct {
	argv      []string
	timeout   time.Duration
	batchSize int
	onError   string

	mu     sync.Mutex
	p      *process // nil: not running
	closed bool
}

func newCommand(c Config) *Command {
	return &Command{argv: append([]string(nil), c.Command...), timeout: c.TimeoutDuration(), batchSize: c.BatchSize, onError: c.OnError}
}

// Score sends reqs to the program in batches.
func (c *Command) Score(ctx context.Context, reqs []Request) ([]Verdict, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := "reward program " + c.argv[0]
	if c.closed {
		return nil, fmt.Errorf("%s: Score after Close", name)
	}
	return scoreBatches(ctx, reqs, c.batchSize, c.onError, name, c.batch)
}

// Close kills and reaps the program, if it runs.
func (c *Command) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.p != nil {
		c.p.stop(0)
		c.p = nil
	}
	return nil
}

// exitGrace is how long a program whose stdout ended may take to exit
// before it is killed, so that its exit status makes the error.
const exitGrace = time.Second

// batch is one request and its reply.
func (c *Command) batch(ctx context.Context, reqs []Request, lo int) ([]Verdict, error) {
	line, err := json.Marshal(batchRequest{Requests: reqs})
	if err != nil {
		return nil, fmt.Errorf("encode the batch: %w", err)
	}
	line = append(line, '\n')
	if c.p != nil {
		// Between batches the program owes nothing: a line now answers no
		// request (a second reply, a debug print) and would be taken for
		// the next batch's reply. This catches such a line only once it
		// has arrived; one still on its way goes as a bad reply, or as the
		// next batch's when it parses and counts right.
		select {
		case l := <-c.p.lines:
			if l.err == nil {
				return nil, c.fail(0, fmt.Sprintf("it wrote a line no request asked for: %q", snippet(l.line, 200)))
			}
			// It ended after its last reply: a fresh one scores this batch.
			c.p.stop(exitGrace)
			c.p = nil
		default:
		}
	}
	if c.p == nil {
		if c.p, err = startProcess(c.argv); err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
	}
	p := c.p
	// The write runs beside the wait: a program that stops reading blocks
	// it, and only the timeout, which kills the program, may end that.
	wrote := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(line)
		wrote <- err
	}()
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	var reply []byte
	lines := p.lines // nil once the reply is in: a second line stays for the next batch's check
	for wrote != nil || reply == nil {
		select {
		case err := <-wrote:
			wrote = nil
			if err != nil {
				return nil, c.fail(exitGrace, fmt.Sprintf("could not write the request (%v)", err))
			}
		case l := <-lines:
			switch {
			case errors.Is(l.err, io.EOF):
				return nil, c.fail(exitGrace, "its stdout ended before a reply")
			case l.err != nil:
				return nil, c.fail(0, fmt.Sprintf("read its reply: %v", l.err))
			}
			reply, lines = l.line, nil
		case <-timer.C:
			return nil, c.fail(0, fmt.Sprintf("no reply within %s (reward.timeout)", c.timeout))
		case <-ctx.Done():
			// Its reply, if it comes, would answer a request no one waits for.
			c.p.stop(0)
			c.p = nil
			return nil, ctx.Err()
		}
	}
	vs, err := decodeReply(reply, reqs, lo)
	var declined remoteError
	if err != nil && !errors.As(err, &declined) {
		return nil, c.fail(0, err.Error())
	}
	return vs, err
}

// fail stops the program (after grace for it to exit by itself) and
// describes what happened, its exit and its stderr.
func (c *Command) fail(grace time.Duration, what string) error {
	p := c.p
	c.p = nil
	exited, status := p.stop(grace)
	msg := what
	switch {
	case exited && status != nil:
		msg += fmt.Sprintf("; it exited (%v)", status)
	case !exited && status != nil && strings.Contains(status.Error(), "not reaped"):
		msg += "; it was sent SIGKILL, but " + status.Error()
	default:
		msg += "; it was killed"
	}
	msg += " and a fresh one scores the next batch"
	if tail := p.stderr.String(); tail != "" {
		msg += "; its stderr ends: " + tail
	} else {
		msg += "; its stderr is empty"
	}
	return errors.New(msg)
}

// process is a running reward program.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *iocap.Tail
	lines  chan lineOrErr // stdout, one line at a time
	quit   chan struct{}  // closed by stop: the reader stops sending
	done   chan struct{}  // closed when the reader returns
}

type lineOrErr struct {
	line []byte
	err  error
}

// waitDelay bounds how long reaping the program waits for its output
// pipes to close, which something it started outside its process group
// may hold open.
const waitDelay = time.Second

func startProcess(argv []string) (*process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	setProcessGroup(cmd)
	cmd.WaitDelay = waitDelay
	p := &process{cmd: cmd, stderr: &iocap.Tail{Max: 4 << 10}, lines: make(chan lineOrErr),
		quit: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil { // Start closes the pipes when it fails
		return nil, err
	}
	p.stdin = stdin
	go p.read(stdout)
	return p, nil
}

// read hands stdout's non-blank lines to the waiting batch, then its end.
func (p *process) read(stdout io.Reader) {
	defer close(p.done)
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(br)
		if err == nil && len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		select {
		case p.lines <- lineOrErr{line, err}:
		case <-p.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// readLine is one line without its end, at most maxReply bytes; a last
// line without "\n" is an error (the program ended mid-line).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxReply {
			return nil, fmt.Errorf("a reply line is longer than %d MiB", maxReply>>20)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return []byte(strings.TrimRight(string(line), "\r\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("its stdout ended mid-line: %q", snippet(line, 200))
		default:
			return nil, err
		}
	}
}

// stop kills the program's process group and reaps it, first giving it
// grace to exit by itself. exited: it ended before the kill; status is
// its Wait error then.
func (p *process) stop(grace time.Duration) (exited bool, status error) {
	close(p.quit)
	waited := make(chan error, 1)
	go func() { waited <- p.cmd.Wait() }()
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case status = <-waited:
			exited = true
		case <-t.C:
		}
		t.Stop()
	}
	// Even after the program's own exit: what it started in its group
	// goes too.
	killGroup(p.cmd.Process)
	// Bounded: once, in a test run beside a heavy job, a killed program
	// was not reaped for minutes (not reproduced since); the trainer must
	// not hang on it.
	reap := time.NewTimer(reapLimit)
	defer reap.Stop()
	if !exited {
		select {
		case status = <-waited:
		case <-reap.C:
			return false, fmt.Errorf("pid %d not reaped within %s of SIGKILL (%s)", p.cmd.Process.Pid, reapLimit, procState(p.cmd.Process.Pid))
		}
	}
	select {
	case <-p.done:
	case <-reap.C:
	}
	return exited, status
}

// reapLimit bounds the wait for a killed program's exit and its stdout's
// end.
const reapLimit = 10 * time.Second

// procState is what /proc says of a process that would not die: its state
// (D: uninterruptible sleep) and where it waits, for the error.
func procState(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "no /proc entry"
	}
	state := "?"
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 {
			state = f[0]
		}
	}
	wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	return fmt.Sprintf("state %s, waiting in %q", state, string(wchan))
}
