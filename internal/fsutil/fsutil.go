// Package fsutil holds the durable-write helpers that model (safetensors,
// saves) and trainer (checkpoints) share.
package fsutil

import "os"

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
