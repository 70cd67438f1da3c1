package jsonl

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLinesSkipsBlankLinesAndCountsThem(t *testing.T) {
	var got []string
	err := Lines(strings.NewReader("{\"a\":1}\n\n  \n{\"a\":2}\n{\"a\":3}"), "in", func(n int, line []byte) error {
		got = append(got, fmt.Sprintf("%d:%s", n, line))
		return nil
	})
	if err != nil || strings.Join(got, " ") != `1:{"a":1} 4:{"a":2} 5:{"a":3}` {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestReadNamesTheBadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.jsonl")
	type row struct{ A int }
	if err := WriteFile(p, []row{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
	rows, err := Read[row](p)
	if err != nil || len(rows) != 2 || rows[1].A != 2 {
		t.Fatalf("%v %v", rows, err)
	}
	os.WriteFile(p, []byte("{\"A\":1}\n{\"A\":\n"), 0o644)
	if _, err := Read[row](p); err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Fatalf("err = %v", err)
	}
}

// Model text keeps its <, > and &.
func TestEncoderKeepsMarkup(t *testing.T) {
	var b strings.Builder
	Encoder(&b).Encode(map[string]string{"t": "<|im_end|> & x"})
	if !strings.Contains(b.String(), "<|im_end|> & x") {
		t.Fatalf("%s", b.String())
	}
}

// TestBatchedKeepsOutputBeforeABadLine: everything before a bad line is
// flushed before it is reported; skipped, it leaves its place in order.
func TestBatchedKeepsOutputBeforeABadLine(t *testing.T) {
	in := "1\n2\n\n3\nx\n4\n5\n"
	parse := func(line []byte) (int, error) {
		var v int
		err := json.Unmarshal(line, &v)
		return v, err
	}
	var got []string
	flush := func(items []int, lines []int) error {
		for i, v := range items {
			got = append(got, fmt.Sprintf("%d@%d", v, lines[i]))
		}
		return nil
	}
	err := Batched(strings.NewReader(in), "stdin", 2, parse, flush, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "stdin line 5: ") {
		t.Fatalf("error %v, want one naming stdin line 5", err)
	}
	if want := "[1@1 2@2 3@4]"; fmt.Sprint(got) != want {
		t.Fatalf("flushed %v before the error, want %s", got, want)
	}
	got = nil
	err = Batched(strings.NewReader(in), "stdin", 2, parse, flush, func(err error) error {
		got = append(got, "bad")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[1@1 2@2 3@4 bad 4@6 5@7]"; fmt.Sprint(got) != want {
		t.Fatalf("with bad lines skipped: %v, want %s", got, want)
	}
}

// TestFileRefusesBadUTF8AndSkipsABOM: bytes that are not UTF-8 are an
// error naming path:line (decoding would turn them into U+FFFD); a byte
// order mark before the first line is not part of it.
func TestFileRefusesBadUTF8AndSkipsABOM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte("\xef\xbb\xbf{\"a\": 1}\n{\"a\": \"caf\xe9\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var first map[string]any
	err := File(path, func(n int, line []byte) error {
		if n == 1 {
			return json.Unmarshal(line, &first)
		}
		return nil
	})
	if first["a"] != 1.0 {
		t.Fatalf("first line after the BOM: %v", first)
	}
	if err == nil || !strings.Contains(err.Error(), path+":2: not valid UTF-8 at byte 11 (0xe9)") {
		t.Fatalf("a latin-1 byte: %v", err)
	}
}
