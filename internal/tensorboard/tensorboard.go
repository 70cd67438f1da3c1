// Package tensorboard writes scalars as TensorBoard event files: TFRecord
// framing (length, masked CRC-32C, payload, masked CRC-32C) around
// tensorflow.Event protocol buffers, encoded by hand — the few fields a
// scalar needs (Event.wall_time, step, file_version, summary; Summary.Value
// tag and simple_value). `tensorboard --logdir` reads the files;
// scripts/ref/tensorboard_ref.py checks one with TensorBoard's own loader.
package tensorboard

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Writer appends events to one events file.
type Writer struct {
	f    *os.File
	w    *bufio.Writer
	Path string
}

// Create starts a new events file in dir (made if missing), named as
// TensorBoard's writers name theirs, with the file-version event first.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	base := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s.%d", now.Unix(), host, os.Getpid()))
	for i := 0; ; i++ {
		path := base
		if i > 0 { // a second writer in the same second and process (a resume in a test)
			path = fmt.Sprintf("%s.%d", base, i)
		}
		w, err := CreateFile(path, now)
		if !errors.Is(err, fs.ErrExist) || i == 99 {
			return w, err
		}
	}
}

// CreateFile is Create with the file's path given (it must not exist).
func CreateFile(path string, now time.Time) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, w: bufio.NewWriter(f), Path: path}
	if err := w.record(Event(now, 0, "brain.Event:2", nil)); err != nil {
		f.Close()
		return nil, err
	}
	return w, w.Flush()
}

// Scalars writes one event at step holding every value, tags in sorted
// order, and flushes it to the file.
func (w *Writer) Scalars(step int64, wall time.Time, values map[string]float64) error {
	if err := w.record(Event(wall, step, "", values)); err != nil {
		return err
	}
	return w.Flush()
}

// SessionStart writes a SessionLog START event at step: a run resumed from
// a checkpoint restarts its series there, and TensorBoard discards what an
// earlier events file of the run holds at step and after (its "purge on
// restart"), so the redone steps are not drawn twice.
func (w *Writer) SessionStart(step int64, wall time.Time) error {
	var b []byte
	b = append(b, 1<<3|1)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(wall.UnixNano())/1e9))
	b = append(b, 2<<3|0)
	b = binary.AppendUvarint(b, uint64(step))
	// Event.session_log (7): SessionLog{status (1): START (1)}.
	b = appendBytes(b, 7, []byte{1<<3 | 0, 1})
	if err := w.record(b); err != nil {
		return err
	}
	return w.Flush()
}

// Flush writes buffered events to the file.
func (w *Writer) Flush() error { return w.w.Flush() }

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// record writes one TFRecord.
func (w *Writer) record(data []byte) error {
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(head[8:], maskedCRC(head[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskedCRC(data))
	for _, b := range [][]byte{head[:], data, tail[:]} {
		if _, err := w.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Event encodes a tensorflow.Event: wall_time (1, double), step (2),
// file_version (3) or a summary (5) of simple_value scalars.
func Event(wall time.Time, step int64, fileVersion string, values map[string]float64) []byte {
	var b []byte
	b = append(b, 1<<3|1)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(wall.UnixNano())/1e9))
	if step != 0 {
		b = append(b, 2<<3|0)
		b = binary.AppendUvarint(b, uint64(step))
	}
	if fileVersion != "" {
		b = appendBytes(b, 3, []byte(fileVersion))
	}
	if len(values) > 0 {
		tags := make([]string, 0, len(values))
		for t := range values {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		var summary []byte
		for _, t := range tags {
			var v []byte
			v = appendBytes(v, 1, []byte(t))
			v = append(v, 2<<3|5)
			v = binary.LittleEndian.AppendUint32(v, math.Float32bits(float32(values[t])))
			summary = appendBytes(summary, 1, v)
		}
		b = appendBytes(b, 5, summary)
	}
	return b
}

// appendBytes appends a length-delimited field.
func appendBytes(b []byte, field int, data []byte) []byte {
	b = append(b, byte(field<<3|2))
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// ReadSessionStarts returns the steps of an events file's SessionLog START
// events (SessionStart), in order.
func ReadSessionStarts(path string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int64
	for len(b) >= 16 {
		n := binary.LittleEndian.Uint64(b[:8])
		if uint64(len(b)) < 16+n {
			return nil, fmt.Errorf("%s: truncated record", path)
		}
		data := b[12 : 12+n]
		b = b[16+n:]
		var step int64
		start := false
		if err := fields(data, func(f, wire int, v uint64, sub []byte) {
			switch {
			case f == 2 && wire == 0:
				step = int64(v)
			case f == 7 && wire == 2:
				fields(sub, func(f, wire int, v uint64, _ []byte) {
					if f == 1 && wire == 0 && v == 1 {
						start = true
					}
				})
			}
		}); err != nil {
			return nil, err
		}
		if start {
			out = append(out, step)
		}
	}
	return out, nil
}

// Scalar is one value read back from an events file.
type Scalar struct {
	Step  int64
	Tag   string
	Value float32
}

// ReadScalars reads the scalars of an events file written by Writer,
// checking every record's checksums (a test's and a report's reader; it
// skips fields it does not know).
func ReadScalars(path string) ([]Scalar, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Scalar
	for rec := 0; len(b) > 0; rec++ {
		if len(b) < 12 {
			return nil, fmt.Errorf("%s: record %d: truncated header", path, rec)
		}
		n := binary.LittleEndian.Uint64(b[:8])
		if maskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:12]) || uint64(len(b)) < 16+n {
			return nil, fmt.Errorf("%s: record %d: bad length", path, rec)
		}
		data := b[12 : 12+n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(b[12+n:16+n]) {
			return nil, fmt.Errorf("%s: record %d: bad checksum", path, rec)
		}
		b = b[16+n:]
		var step int64
		var summary []byte
		if err := fields(data, func(f, wire int, v uint64, sub []byte) {
			switch {
			case f == 2 && wire == 0:
				step = int64(v)
			case f == 5 && wire == 2:
				summary = sub
			}
		}); err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, rec, err)
		}
		err := fields(summary, func(f, wire int, _ uint64, val []byte) {
			if f != 1 || wire != 2 {
				return
			}
			s := Scalar{Step: step}
			fields(val, func(f, wire int, v uint64, sub []byte) {
				switch {
				case f == 1 && wire == 2:
					s.Tag = string(sub)
				case f == 2 && wire == 5:
					s.Value = math.Float32frombits(uint32(v))
				}
			})
			out = append(out, s)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, rec, err)
		}
	}
	return out, nil
}

// fields walks a protocol buffer's fields: varints and fixed values in v,
// length-delimited ones in sub.
func fields(b []byte, fn func(field, wire int, v uint64, sub []byte)) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("bad field key")
		}
		b = b[n:]
		field, wire := int(key>>3), int(key&7)
		switch wire {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("bad varint")
			}
			fn(field, wire, v, nil)
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("short fixed64")
			}
			fn(field, wire, binary.LittleEndian.Uint64(b), nil)
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("short fixed32")
			}
			fn(field, wire, uint64(binary.LittleEndian.Uint32(b)), nil)
			b = b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return fmt.Errorf("bad length")
			}
			fn(field, wire, 0, b[n:n+int(l)])
			b = b[n+int(l):]
		default:
			return fmt.Errorf("wire type %d", wire)
		}
	}
	return nil
}
