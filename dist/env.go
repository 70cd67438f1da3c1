package dist

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Env is a launch's rendezvous, as torchrun (torch 2.1) or `lanpo launch`
// describe it to each process in environment variables:
//
//	RANK, WORLD_SIZE              this process's rank among WORLD_SIZE
//	LOCAL_RANK, LOCAL_WORLD_SIZE  the same among the processes of this machine
//	GROUP_RANK                    this machine's index (torchrun's node rank)
//	MASTER_ADDR, MASTER_PORT      where the TCPStore rendezvous is served
//	TORCHELASTIC_USE_AGENT_STORE  "True": torchrun's agent serves that store
//	TORCHELASTIC_RESTART_COUNT    how many times torchrun restarted the workers
//	TORCHELASTIC_RUN_ID           torchrun's --rdzv-id
type Env struct {
	Rank, LocalRank, World, LocalWorld, NodeRank int
	MasterAddr                                   string
	MasterPort                                   int
	// AgentStore: torchrun's agent already serves the TCPStore on
	// MasterPort, so every rank, rank 0 included, connects as a client and
	// keeps its keys under /worker/attempt_<RestartCount> (a restarted
	// attempt must not read the keys of the one before).
	AgentStore   bool
	RestartCount int
	RunID        string
}

// StorePrefix is the key prefix in the rendezvous store: torchrun's, when
// its agent serves the store, else none.
func (e Env) StorePrefix() string {
	if !e.AgentStore {
		return ""
	}
	return fmt.Sprintf("/worker/attempt_%d", e.RestartCount)
}

// FromEnv reads Env from the process environment; launched is false when
// WORLD_SIZE is unset (a plain single-process run; env is then the world of
// one). Malformed or inconsistent variables are errors naming the variable.
func FromEnv() (env Env, launched bool, err error) {
	return fromLookup(os.LookupEnv)
}

func fromLookup(lookup func(string) (string, bool)) (Env, bool, error) {
	single := Env{World: 1, LocalWorld: 1}
	if _, ok := lookup("WORLD_SIZE"); !ok {
		return single, false, nil
	}
	var e Env
	var err error
	// num reads an integer variable; def is its value when unset (< 0: the
	// variable is required).
	num := func(name string, def, min int) int {
		if err != nil {
			return 0
		}
		s, ok := lookup(name)
		if !ok || strings.TrimSpace(s) == "" {
			if def < 0 {
				err = fmt.Errorf("%s is not set (WORLD_SIZE is: a launcher sets both)", name)
			}
			return def
		}
		v, perr := strconv.Atoi(strings.TrimSpace(s))
		if perr != nil {
			err = fmt.Errorf("%s=%q: not an integer", name, s)
			return 0
		}
		if v < min {
			err = fmt.Errorf("%s=%d: must be at least %d", name, v, min)
		}
		return v
	}
	e.World = num("WORLD_SIZE", -1, 1)
	e.Rank = num("RANK", -1, 0)
	// Launchers always set the local values; a hand-written environment
	// for one machine may leave them out.
	e.LocalWorld = num("LOCAL_WORLD_SIZE", e.World, 1)
	e.LocalRank = num("LOCAL_RANK", e.Rank, 0)
	if err == nil && e.LocalWorld > 0 {
		e.NodeRank = num("GROUP_RANK", e.Rank/e.LocalWorld, 0)
	}
	e.RestartCount = num("TORCHELASTIC_RESTART_COUNT", 0, 0)
	if err != nil {
		return single, true, err
	}
	switch {
	case e.Rank >= e.World:
		return single, true, fmt.Errorf("RANK=%d: must be below WORLD_SIZE=%d", e.Rank, e.World)
	case e.LocalWorld > e.World:
		return single, true, fmt.Errorf("LOCAL_WORLD_SIZE=%d: larger than WORLD_SIZE=%d", e.LocalWorld, e.World)
	case e.LocalRank >= e.LocalWorld:
		return single, true, fmt.Errorf("LOCAL_RANK=%d: must be below LOCAL_WORLD_SIZE=%d", e.LocalRank, e.LocalWorld)
	}
	e.MasterAddr, _ = lookup("MASTER_ADDR")
	e.MasterAddr = strings.TrimSpace(e.MasterAddr)
	if e.World > 1 {
		if e.MasterAddr == "" {
			return single, true, fmt.Errorf("MASTER_ADDR is not set (WORLD_SIZE=%d needs a rendezvous address)", e.World)
		}
		e.MasterPort = num("MASTER_PORT", -1, 1)
		if err != nil {
			return single, true, err
		}
		if e.MasterPort > 65535 {
			return single, true, fmt.Errorf("MASTER_PORT=%d: not a TCP port", e.MasterPort)
		}
	}
	if s, ok := lookup("TORCHELASTIC_USE_AGENT_STORE"); ok {
		// torchrun writes Python's str(bool).
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "1":
			e.AgentStore = true
		case "false", "0", "":
		default:
			return single, true, fmt.Errorf("TORCHELASTIC_USE_AGENT_STORE=%q: want True or False", s)
		}
	}
	e.RunID, _ = lookup("TORCHELASTIC_RUN_ID")
	return e, true, nil
}
