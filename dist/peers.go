package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// When a collective fails, Gloo says what the socket saw ("Connection closed
// by peer [127.0.0.1]:40123"), not which rank is behind it. So at Init every
// rank tells the others its host and pid, and a failure checks which ranks
// on this host are gone: that lets a survivor name the rank that died.

// peer is one rank's identity. Host includes the pid namespace, so two
// containers sharing a hostname are not taken for one host.
type peer struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
}

func self() peer {
	host, _ := os.Hostname()
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil {
		host += " " + ns
	}
	return peer{Host: host, PID: os.Getpid()}
}

// exchangePeers all-gathers every rank's identity (part of Init, and the
// group's first collective).
func (c *group) exchangePeers() error {
	b, err := json.Marshal(self())
	if err != nil {
		return err
	}
	all, err := c.AllGatherBytes(b)
	if err != nil {
		return err
	}
	c.peers = make([]peer, len(all))
	for r, pb := range all {
		if err := json.Unmarshal(pb, &c.peers[r]); err != nil {
			return fmt.Errorf("dist rank %d/%d: init: rank %d's identity %q: %w", c.rank, c.size, r, pb, err)
		}
	}
	return nil
}

// exitWait is how long a failed collective waits for a dead peer to show as
// exited: its sockets close while the kernel tears the process down, a
// moment before it becomes a zombie.
const exitWait = 500 * time.Millisecond

// diagnose returns what to add to a failed collective's error: which ranks
// on this host have exited, or that all of them are alive.
func (c *group) diagnose() string {
	me := self()
	var local, remote []int
	for r, p := range c.peers {
		switch {
		case r == c.rank:
		case p.Host == me.Host:
			local = append(local, r)
		default:
			remote = append(remote, r)
		}
	}
	if len(local) == 0 {
		return ""
	}
	deadline := time.Now().Add(exitWait)
	for {
		var gone []string
		for _, r := range local {
			if exited(c.peers[r].PID) {
				gone = append(gone, fmt.Sprintf("rank %d (pid %d on this host) has exited", r, c.peers[r].PID))
			}
		}
		if len(gone) > 0 {
			return "; " + strings.Join(gone, "; ")
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := "; every other rank on this host is alive (one may be stuck, or calling collectives in another order)"
	if len(remote) > 0 {
		s = fmt.Sprintf("; the other ranks on this host are alive; ranks %v are on other hosts", remote)
	}
	return s
}

// exited reports whether pid is gone: no such process, or a zombie that
// its parent (the launcher) has not reaped yet.
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// Without /proc (not Linux) a zombie cannot be told from the living.
		_, perr := os.Stat("/proc/self/stat")
		return perr == nil && errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st == 'Z' || st == 'X'
}
