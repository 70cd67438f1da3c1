// Package jsonl reads and writes JSON Lines, the format of every dataset,
// metrics file and CLI stream in lanpo. Reading goes line by line with the
// line number at hand, so errors can name name:line.
package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// maxLine bounds one line (a long chat or a whole model response fits).
const maxLine = 1 << 30

// Lines calls fn with every non-blank line of r and its 1-based number.
// name (a path, or "stdin") prefixes read errors; fn's errors are returned
// as they are, so fn names the line itself when it reports one.
func Lines(r io.Reader, name string, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, bom) // editors on Windows start files with one
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// bom is the UTF-8 byte order mark.
var bom = []byte("\xef\xbb\xbf")

// CheckUTF8 says where a line stops being valid UTF-8 (JSON decoding
// would silently turn the bytes into U+FFFD).
func CheckUTF8(line []byte) error {
	if utf8.Valid(line) {
		return nil
	}
	for i := 0; i < len(line); {
		r, size := utf8.DecodeRune(line[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("not valid UTF-8 at byte %d (0x%02x): save the file as UTF-8", i+1, line[i])
		}
		i += size
	}
	return nil
}

// File is Lines over the file at path; a line that is not valid UTF-8 is
// an error naming path:line.
func File(path string, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return Lines(f, path, func(n int, line []byte) error {
		if err := CheckUTF8(line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		return fn(n, line)
	})
}

// Read decodes every line of the file at path as a T; a line that does not
// decode is an error naming path:line.
func Read[T any](path string) ([]T, error) {
	var out []T
	err := File(path, func(n int, line []byte) error {
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// Encoder returns a JSON encoder that writes one value per line and leaves
// <, > and & as they are (model text is full of them).
func Encoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// WriteFile writes rows to path, one JSON value per line.
func WriteFile[T any](path string, rows []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := Encoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Batched streams r's lines through a batch-at-a-time stage: parse turns
// a line into an item, flush handles up to size items (with their line
// numbers) and writes their results. Results keep input order, and every
// line before a bad one is flushed before the bad one is dealt with, so a
// bad line never costs the output before it. A line parse rejects becomes
// an error naming it ("stdin line 7: ..."); with bad nil that error ends
// the stream, else bad is called with it (to write what stands in the
// line's place) and the stream goes on unless bad returns an error.
func Batched[T any](r io.Reader, name string, size int, parse func(line []byte) (T, error),
	flush func(items []T, lines []int) error, bad func(err error) error) error {
	var items []T
	var lines []int
	send := func() error {
		if len(items) == 0 {
			return nil
		}
		err := flush(items, lines)
		items, lines = items[:0], lines[:0]
		return err
	}
	err := Lines(r, name, func(n int, line []byte) error {
		err := CheckUTF8(line)
		var v T
		if err == nil {
			v, err = parse(line)
		}
		if err != nil {
			if ferr := send(); ferr != nil {
				return ferr
			}
			err = fmt.Errorf("%s line %d: %w", name, n, err)
			if bad == nil {
				return err
			}
			return bad(err)
		}
		items, lines = append(items, v), append(lines, n)
		if len(items) == size {
			return send()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return send()
}
