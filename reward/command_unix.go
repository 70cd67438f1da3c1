//go:build unix

package reward

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd in a process group of its own, so that
// killGroup ends what it started too (a shell's children, a worker pool).
// Pdeathsig kills the program when the thread that started it ends — the
// trainer's torch thread, locked for the whole run, so in practice when
// the trainer dies (SIGKILL included) and Close never runs.
func setProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = processGroupAttr() }

// processGroupAttr starts a process in a process group of its own, killed
// with the thread that started it (setProcessGroup; the code sandbox's
// none mode).
func processGroupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to p's process group (its id is p's pid), and
// to p itself: should the group be gone, p must still not outlive the kill
// (reaping it would wait forever).
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}
