// Package fsutil holds the durable-write helpers that model (safetensors,
// saves) and trainer (checkpoints) share.
package fsutil

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
)

// SyncDir fsyncs a directory, so that a rename or create inside it
// survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteFileSync writes a file and fsyncs it.
func WriteFileSync(path string, data []byte) error {
	return writeSync(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o666, data) // as os.Create
}

// AppendFileSync appends data to a file (made if missing) and fsyncs it.
func AppendFileSync(path string, data []byte) error {
	return writeSync(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644, data)
}

func writeSync(path string, flag int, perm os.FileMode, data []byte) error {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CopyFile copies src to dst, fsynced.
func CopyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return WriteFileSync(dst, b)
}

// Digests of files as they were written: a writer that hashes what it
// writes (HashPipe) records the SHA-256 of the file it produced, so that a
// checkpoint's manifest does not read gigabytes back. A recorded digest is
// taken only while the file still has the size and modification time it
// had when recorded.

type digestEntry struct {
	sum   string
	size  int64
	mtime int64
}

var digests sync.Map // absolute path → digestEntry

// RecordDigest records path's SHA-256 (hex), for the file as it is now.
func RecordDigest(path, sum string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	info, err := os.Stat(abs)
	if err != nil {
		return
	}
	digests.Store(abs, digestEntry{sum, info.Size(), info.ModTime().UnixNano()})
}

// TakeDigest returns (and forgets) the digest recorded for path, if the
// file is still as it was then.
func TakeDigest(path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	v, ok := digests.LoadAndDelete(abs)
	if !ok {
		return "", false
	}
	e := v.(digestEntry)
	info, err := os.Stat(abs)
	if err != nil || info.Size() != e.size || info.ModTime().UnixNano() != e.mtime {
		return "", false
	}
	return e.sum, true
}

// HashPipe is an io.Writer that hashes (SHA-256) what is written to it on
// a goroutine of its own, so that hashing overlaps the disk write it sits
// beside (io.MultiWriter(file, pipe)). Sum waits for it.
type HashPipe struct {
	ch   chan []byte
	done chan string
}

// NewHashPipe starts a hashing goroutine.
func NewHashPipe() *HashPipe {
	p := &HashPipe{ch: make(chan []byte, 4), done: make(chan string, 1)}
	go func() {
		h := sha256.New()
		for b := range p.ch {
			h.Write(b)
			hashBufs.Put(&b)
		}
		p.done <- hex.EncodeToString(h.Sum(nil))
	}()
	return p
}

// hashBufs are the copies a HashPipe hands its goroutine, reused: a
// checkpoint writes gigabytes through 4 MiB writes.
var hashBufs sync.Pool

// Write queues a copy of b for hashing.
func (p *HashPipe) Write(b []byte) (int, error) {
	var buf []byte
	if v, ok := hashBufs.Get().(*[]byte); ok && cap(*v) >= len(b) {
		buf = (*v)[:len(b)]
	} else {
		buf = make([]byte, len(b), max(len(b), 4<<20))
	}
	copy(buf, b)
	p.ch <- buf
	return len(b), nil
}

// Sum ends the pipe and returns the SHA-256 (hex) of all that was written.
func (p *HashPipe) Sum() string {
	close(p.ch)
	return <-p.done
}
