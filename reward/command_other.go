//go:build !unix

package reward

import (
	"os"
	"os/exec"
)

// Without process groups only the program itself is killed.
func setProcessGroup(*exec.Cmd) {}

func killGroup(p *os.Process) { _ = p.Kill() }
