package fsutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// HashPipe's sum is the SHA-256 of all that went through it, in chunks of
// any size; a recorded digest is taken once, and not at all when the file
// changed since.
func TestHashPipeAndRecordedDigests(t *testing.T) {
	data := bytes.Repeat([]byte("lanpo checkpoint bytes "), 100000)
	want := sha256.Sum256(data)
	p := NewHashPipe()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 7919)
		p.Write(rest[:n])
		rest = rest[n:]
	}
	if got := p.Sum(); got != hex.EncodeToString(want[:]) {
		t.Fatalf("HashPipe: %s, want %x", got, want)
	}
	var buf bytes.Buffer
	p = NewHashPipe()
	io.Copy(io.MultiWriter(&buf, p), bytes.NewReader(data))
	if p.Sum() != hex.EncodeToString(want[:]) || !bytes.Equal(buf.Bytes(), data) {
		t.Fatal("HashPipe beside a file in a MultiWriter")
	}

	path := filepath.Join(t.TempDir(), "f")
	if err := WriteFileSync(path, data); err != nil {
		t.Fatal(err)
	}
	RecordDigest(path, "abc")
	if sum, ok := TakeDigest(path); !ok || sum != "abc" {
		t.Fatalf("TakeDigest: %q %v", sum, ok)
	}
	if _, ok := TakeDigest(path); ok {
		t.Fatal("a digest taken twice")
	}
	RecordDigest(path, "abc")
	later := time.Now().Add(time.Hour)
	os.Chtimes(path, later, later) // rewritten since (same size)
	if _, ok := TakeDigest(path); ok {
		t.Fatal("a digest recorded before the file changed was taken")
	}
}
