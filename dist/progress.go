package dist

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Progress, for telling a hung rank from a slow one: a rank started by
// Launch finds LANPO_PROGRESS_DIR in its environment and writes what it
// last completed (step, phase, progress within the phase) to
// rank-R.json there, at most once a second and at every phase change. The
// launcher reads the files: a job in which no rank has reported for
// HangTimeout is hung — a rank stuck in a collective still answers
// signals, but it reports nothing — and the rank that reported least
// recently is named as the one the others wait for.

// ProgressDirVar names the directory the launcher reads progress from.
const ProgressDirVar = "LANPO_PROGRESS_DIR"

// Progress is one rank's last report.
type Progress struct {
	Rank   int    `json:"rank"`
	Step   int    `json:"step"`
	Phase  string `json:"phase"`
	Detail string `json:"detail,omitempty"`
	Unix   int64  `json:"unix_ms"`
	// FirstStep is the step of this process's first report: the step a
	// restarted rank resumed at.
	FirstStep int `json:"first_step"`
}

func (p Progress) String() string {
	s := fmt.Sprintf("step %d", p.Step)
	if p.Phase != "" {
		s += ", " + p.Phase
	}
	if p.Detail != "" {
		s += " " + p.Detail
	}
	return s
}

// ProgressFile writes this rank's reports; a nil *ProgressFile (not
// started by a launcher that reads them) does nothing.
type ProgressFile struct {
	path, tmp string
	rank      int
	last      time.Time
	lastPhase string
	first     int
}

// NewProgressFile is the progress file of this rank, or nil when the
// process was not started by lanpo launch.
func NewProgressFile(rank int) *ProgressFile {
	dir := os.Getenv(ProgressDirVar)
	if dir == "" {
		return nil
	}
	path := filepath.Join(dir, "rank-"+strconv.Itoa(rank)+".json")
	return &ProgressFile{path: path, tmp: path + ".tmp", rank: rank}
}

// Report records that step's phase has got as far as detail; it writes at
// most once a second unless the phase changed.
func (f *ProgressFile) Report(step int, phase, detail string) {
	if f == nil {
		return
	}
	now := time.Now()
	if phase == f.lastPhase && now.Sub(f.last) < time.Second {
		return
	}
	f.last, f.lastPhase = now, phase
	if f.first == 0 {
		f.first = step
	}
	b, _ := json.Marshal(Progress{Rank: f.rank, Step: step, Phase: phase, Detail: detail, Unix: now.UnixMilli(), FirstStep: f.first})
	// Written whole and renamed: the launcher never reads half a report.
	if os.WriteFile(f.tmp, b, 0o644) == nil {
		os.Rename(f.tmp, f.path)
	}
}

// readProgress reads every rank's last report in dir; a rank that has not
// reported yet is absent.
func readProgress(dir string) map[int]Progress {
	out := map[int]Progress{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "rank-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var p Progress
		if json.Unmarshal(b, &p) == nil {
			out[p.Rank] = p
		}
	}
	return out
}

// HangError is how a launch ends when no rank made progress for the hang
// timeout: Rank is the one that reported least recently (the one the
// others wait for), Last its last report (zero: none).
type HangError struct {
	Rank    int
	Last    Progress
	Timeout time.Duration
	All     map[int]Progress
	State   string // the rank's process state when it is the telling one: T (stopped), D (uninterruptible sleep)
}

func (e *HangError) Error() string {
	last := "it never reported"
	if e.Last.Unix > 0 {
		last = "its last report: " + e.Last.String() + " at " + time.UnixMilli(e.Last.Unix).UTC().Format("15:04:05")
	}
	switch e.State {
	case "T", "t":
		last += "; its process is stopped"
	case "D":
		last += "; its process is in uninterruptible sleep (waiting on a device or filesystem)"
	}
	return fmt.Sprintf("no rank made progress for %s: rank %d looks hung (%s); %s", e.Timeout, e.Rank, last, progressSummary(e.All))
}

// progressSummary is every rank's last report, one clause each.
func progressSummary(all map[int]Progress) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(all)) {
		p := all[r]
		parts = append(parts, fmt.Sprintf("rank %d: %s, %s ago", r, p, time.Since(time.UnixMilli(p.Unix)).Round(time.Second)))
	}
	if len(parts) == 0 {
		return "no rank has reported progress"
	}
	return "last progress — " + strings.Join(parts, "; ")
}

// procState is a process's state letter from /proc/PID/stat (R, S, D, T,
// Z…), or "" when it cannot be read.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if f := strings.Fields(string(b[i+1:])); i >= 0 && len(f) > 0 {
		return f[0]
	}
	return ""
}

// hung reports whether the job is hung at now: some rank has reported (a
// command that never reports is never taken as hung) and no report is
// newer than timeout (a rank that has not reported counts from start). It
// returns the rank that reported least recently.
func hung(all map[int]Progress, ranks []int, start, now time.Time, timeout time.Duration) (int, bool) {
	if len(all) == 0 {
		return -1, false
	}
	newest := start
	oldestRank, oldest := -1, time.Time{}
	for _, r := range ranks {
		t := start
		if p, ok := all[r]; ok {
			t = time.UnixMilli(p.Unix)
		}
		if t.After(newest) {
			newest = t
		}
		if oldestRank < 0 || t.Before(oldest) {
			oldestRank, oldest = r, t
		}
	}
	return oldestRank, now.Sub(newest) > timeout
}
