package reward

import (
	"os"
	"syscall"
)

// sandboxAttr is how a candidate's first process starts. namespaces: new
// user, PID, mount, network, IPC and UTS namespaces. Run as root, uid 0
// inside maps to root (init.py needs it to bind the interpreter from
// wherever it lives) and uid runs the candidate (switchUID); run as
// another user, the one uid maps to uid 0 inside and init.py drops every
// capability instead. none: a process group of its own. Either way the
// parent-death signal kills it with the thread that started it.
func sandboxAttr(mode string, uid int) (attr *syscall.SysProcAttr, switchUID bool) {
	if mode == SandboxNone {
		return processGroupAttr(), false
	}
	attr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Pdeathsig: syscall.SIGKILL,
		// A session of its own: kill(0, …) from inside reaches only its
		// own processes. In the trainer's process group, a candidate's
		// os.kill(os.getppid(), 9) — getppid() is 0 in a PID namespace —
		// killed the candidates of other sandboxes running beside it (the
		// same uid), and their verdicts depended on what ran beside them.
		Setsid: true,
	}
	if os.Geteuid() == 0 {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappingsEnableSetgroups = true
		return attr, true
	}
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	return attr, false
}

// killSandbox ends a candidate: its first process (in namespaces mode the
// PID namespace, and all in it, ends with it) and its process group.
func killSandbox(p *os.Process, mode string) {
	if mode == SandboxNone {
		killGroup(p)
		return
	}
	_ = p.Kill()
}
