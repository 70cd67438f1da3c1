package jsonl

import (
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
