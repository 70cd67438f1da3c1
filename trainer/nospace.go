package trainer

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A checkpoint save that runs out of disk space (ENOSPC, or EDQUOT: a
// quota) removes its partial directory — the previous complete checkpoint
// stays as it was — and ends the run with a NoSpaceError naming the
// filesystem, what was free and what the checkpoint needed. lanpo exits 3
// for it, and lanpo launch --max-restarts does not restart into the same
// full disk.

// NoSpaceError is a checkpoint that did not fit on its filesystem.
type NoSpaceError struct {
	Dir        string // the checkpoint being written
	Mount      string // the filesystem's mount point
	FreeBytes  int64  // free for an unprivileged writer when it failed
	Needed     int64  // the previous checkpoint's size (0: none yet)
	WrittenErr error
}

func (e *NoSpaceError) Error() string {
	need := "this is the run's first checkpoint"
	if e.Needed > 0 {
		need = fmt.Sprintf("a checkpoint of this run takes %s", mb(e.Needed))
	}
	return fmt.Sprintf("no space left for checkpoint %s on the filesystem mounted at %s (%s free; %s): %v; "+
		"the partial checkpoint was removed and the previous one is intact: free space or move run_dir, then --resume auto",
		e.Dir, e.Mount, mb(e.FreeBytes), need, e.WrittenErr)
}

func (e *NoSpaceError) Unwrap() error { return e.WrittenErr }

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// isNoSpace reports whether err is a full filesystem or an exceeded quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// noSpace describes a save of final (in root) that ran out of space.
func noSpace(root, final string, err error) *NoSpaceError {
	e := &NoSpaceError{Dir: final, Mount: mountPoint(root), WrittenErr: err}
	var st syscall.Statfs_t
	if syscall.Statfs(root, &st) == nil {
		e.FreeBytes = int64(st.Bavail) * int64(st.Bsize)
	}
	if done := completeCheckpoints(root); len(done) > 0 {
		if man, rerr := readManifest(done[len(done)-1]); rerr == nil {
			for _, n := range man.Files {
				e.Needed += n
			}
		}
	}
	return e
}

// mountPoint is the mount point of the filesystem holding path: the
// longest mount point in /proc/self/mountinfo that contains it.
func mountPoint(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	defer f.Close()
	best := "/"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := strings.ReplaceAll(fields[4], `\040`, " ")
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	return best
}
