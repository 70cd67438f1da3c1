//go:build !linux

package reward

import (
	"os"
	"os/exec"
	"syscall"
)

// Without Linux namespaces only none mode runs (NewSandbox refuses the
// other), in a process group where there are groups.
func sandboxAttr(string, int) (*syscall.SysProcAttr, bool) {
	var cmd exec.Cmd
	setProcessGroup(&cmd)
	return cmd.SysProcAttr, false
}

func killSandbox(p *os.Process, _ string) { killGroup(p) }
