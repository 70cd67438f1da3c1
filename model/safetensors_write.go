package model

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

// TensorSource is one tensor to write: its header entry and a function that
// writes exactly DType.Size() × Π Shape bytes, so a checkpoint can stream
// tensors from the device one at a time.
type TensorSource struct {
	Name  string
	DType STDType
	Shape []int64
	Write func(w io.Writer) error
}

// Bytes wraps raw data as a TensorSource.
func Bytes(name string, dtype STDType, shape []int64, data []byte) TensorSource {
	return TensorSource{Name: name, DType: dtype, Shape: shape, Write: func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}}
}

// WriteSafetensors writes a safetensors file atomically (temporary file,
// fsync, rename). Tensors are laid out as the reference implementation
// does — by dtype, then name — and the header is padded with spaces to a
// multiple of 8 bytes, so for the same tensors the file is byte-identical to
// Python's safetensors.save_file (with at most one metadata key, whose
// order Python leaves to a hash map).
func WriteSafetensors(path string, tensors []TensorSource, metadata map[string]string) (err error) {
	ordered := append([]TensorSource(nil), tensors...)
	sort.SliceStable(ordered, func(i, j int) bool {
		ri, rj := stDTypeRank[ordered[i].DType], stDTypeRank[ordered[j].DType]
		if ri != rj {
			return ri > rj
		}
		return ordered[i].Name < ordered[j].Name
	})
	header, sizes, err := buildHeader(ordered, metadata)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// The file's SHA-256 is computed as it is written (on another
	// goroutine) and recorded for a checkpoint's manifest.
	hp := fsutil.NewHashPipe()
	defer func() {
		if sum := hp.Sum(); err == nil {
			fsutil.RecordDigest(path, sum)
		}
	}()
	w := bufio.NewWriterSize(io.MultiWriter(tmp, hp), 4<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	w.Write(n[:])
	w.Write(header)
	for i, t := range ordered {
		cw := &countingWriter{w: w}
		if t.Write == nil {
			return fmt.Errorf("write %s: tensor %q has no data", path, t.Name)
		}
		if err := t.Write(cw); err != nil {
			return fmt.Errorf("write %s: tensor %q: %w", path, t.Name, err)
		}
		if cw.n != sizes[i] {
			return fmt.Errorf("write %s: tensor %q: wrote %d bytes, %s × %v needs %d", path, t.Name, cw.n, t.DType, t.Shape, sizes[i])
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

func buildHeader(ordered []TensorSource, metadata map[string]string) ([]byte, []int64, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		sep()
		b.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	sizes := make([]int64, len(ordered))
	seen := map[string]bool{}
	var offset int64
	for i, t := range ordered {
		if t.Name == "__metadata__" || seen[t.Name] {
			return nil, nil, fmt.Errorf("tensor name %q is reserved or repeated", t.Name)
		}
		seen[t.Name] = true
		size := t.DType.Size()
		if size == 0 {
			return nil, nil, fmt.Errorf("tensor %q: unsupported dtype %q", t.Name, t.DType)
		}
		for _, d := range t.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: negative dimension in %v", t.Name, t.Shape)
			}
			size *= d
		}
		sizes[i] = size
		sep()
		writeJSONString(&b, t.Name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, string(t.DType))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", d)
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, offset+size)
		offset += size
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), sizes, nil
}

// writeJSONString writes s as a JSON string without Go's HTML escaping, as
// serde_json does.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
