package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type refTensor struct {
	DType  string    `json:"dtype"`
	Shape  []int64   `json:"shape"`
	Values []float64 `json:"values"`
}

func loadRef(t *testing.T) map[string]refTensor {
	t.Helper()
	b, err := os.ReadFile("testdata/ref.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]refTensor
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// decode turns little-endian bytes of a safetensors dtype into float64s.
func decode(t *testing.T, dt STDType, b []byte) []float64 {
	t.Helper()
	var out []float64
	size := int(dt.Size())
	for i := 0; i+size <= len(b); i += size {
		c := b[i : i+size]
		switch dt {
		case "F64":
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(c)))
		case "F32":
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(c))))
		case "F16":
			out = append(out, halfToFloat(binary.LittleEndian.Uint16(c)))
		case "I64":
			out = append(out, float64(int64(binary.LittleEndian.Uint64(c))))
		case "I32":
			out = append(out, float64(int32(binary.LittleEndian.Uint32(c))))
		case "U8", "BOOL":
			out = append(out, float64(c[0]))
		default:
			t.Fatalf("decode: dtype %s", dt)
		}
	}
	return out
}

func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac / 1024 * math.Pow(2, -14)
	case 31:
		return sign * math.Inf(1)
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

var numpyToST = map[string]STDType{"float32": "F32", "float16": "F16", "float64": "F64", "int64": "I64", "int32": "I32", "bool": "BOOL", "uint8": "U8"}

func TestReadPythonFile(t *testing.T) {
	ref := loadRef(t)
	f, err := OpenSafetensors("testdata/ref.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata = %v", f.Metadata)
	}
	if len(f.Tensors()) != len(ref) {
		t.Errorf("%d tensors, want %d", len(f.Tensors()), len(ref))
	}
	for name, r := range ref {
		b, info, err := f.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != numpyToST[r.DType] || !equalShape(info.Shape, r.Shape) {
			t.Errorf("%s: %s %v, want %s %v", name, info.DType, info.Shape, r.DType, r.Shape)
		}
		got := decode(t, info.DType, b)
		if len(got) != len(r.Values) {
			t.Fatalf("%s: %d values, want %d", name, len(got), len(r.Values))
		}
		for i := range got {
			if got[i] != r.Values[i] {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], r.Values[i])
			}
		}
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWriteIsByteIdenticalToPython rewrites the reference file's tensors
// with WriteSafetensors and compares the bytes with Python's file.
func TestWriteIsByteIdenticalToPython(t *testing.T) {
	f, err := OpenSafetensors("testdata/ref.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var srcs []TensorSource
	// Reverse order: the writer must impose the layout itself.
	ts := f.Tensors()
	for i := len(ts) - 1; i >= 0; i-- {
		b, info, _ := f.Bytes(ts[i].Name)
		srcs = append(srcs, Bytes(info.Name, info.DType, info.Shape, b))
	}
	out := filepath.Join(t.TempDir(), "go.safetensors")
	if err := WriteSafetensors(out, srcs, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile("testdata/ref.safetensors")
	if !bytes.Equal(got, want) {
		t.Errorf("lanpo's file differs from Python's:\n got %q\nwant %q", got[:min(len(got), 300)], want[:min(len(want), 300)])
	}
}

func TestWriteReadRoundTripBF16(t *testing.T) {
	data := []byte{0x80, 0x3f, 0x00, 0xc0, 0x49, 0x40} // bf16 1, -2, 3.14
	out := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(out, []TensorSource{Bytes("w", "BF16", []int64{3}, data)}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, info, err := f.Bytes("w")
	if err != nil || !bytes.Equal(b, data) || info.DType != "BF16" {
		t.Errorf("round trip: %v %v %v", b, info, err)
	}
	if f.Metadata != nil {
		t.Errorf("metadata %v, want none", f.Metadata)
	}
}

func TestWriteChecksSizes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.safetensors")
	err := WriteSafetensors(out, []TensorSource{Bytes("w", "F32", []int64{3}, make([]byte, 8))}, nil)
	if err == nil || !strings.Contains(err.Error(), `tensor "w": wrote 8 bytes`) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a failed write left the file behind")
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*tmp*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// file builds a safetensors byte stream from a header string and data.
func file(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestRejectsBadFiles(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"shorter than 8 bytes", []byte{1, 2, 3}, "too short"},
		{"header longer than file", file(ok, make([]byte, 8))[:20], "does not fit"},
		{"huge header length", append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, []byte("{}")...), "does not fit"},
		{"not JSON", file("[1,2]", nil), "not a JSON object"},
		{"broken JSON", file(`{"a":{"dtype":"F32",`, nil), "tensor \"a\""},
		{"duplicate name", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), "appears twice"},
		{"unknown dtype", file(`{"a":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `unsupported dtype "F7"`},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), "is 12 bytes but data_offsets span 8"},
		{"offsets outside", file(ok, make([]byte, 4)), "outside the 4-byte data buffer"},
		{"end before begin", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, make([]byte, 4)), "outside"},
		{"negative dimension", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, nil), "negative dimension"},
		{"shape overflow", file(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, nil), "overflows"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), "overlap"},
		{"bad metadata", file(`{"__metadata__":{"x":1}}`, nil), "__metadata__"},
		{"trailing bytes", file(ok+"x", make([]byte, 8)), "after its JSON"},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), "data_offsets must be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := newFile("bad.safetensors", c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "bad.safetensors: ") {
				t.Errorf("got %v, want an error naming the file and containing %q", err, c.want)
			}
		})
	}
	// Space padding after the JSON is legal.
	if _, err := newFile("ok", file(ok+"   ", make([]byte, 8))); err != nil {
		t.Errorf("padded header rejected: %v", err)
	}
}

func TestOpenTruncatedFile(t *testing.T) {
	b, _ := os.ReadFile("testdata/ref.safetensors")
	p := filepath.Join(t.TempDir(), "cut.safetensors")
	os.WriteFile(p, b[:len(b)-10], 0o644)
	if _, err := OpenSafetensors(p); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("truncated file: %v", err)
	}
}

// FuzzSafetensorsHeader: no input may panic; accepted files must describe
// tensors that lie inside the buffer without overlapping.
func FuzzSafetensorsHeader(f *testing.F) {
	ref, _ := os.ReadFile("testdata/ref.safetensors")
	f.Add(ref)
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"__metadata__":{"k":"v"}}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		sf, err := newFile("fuzz", b)
		if err != nil {
			return
		}
		var prevEnd int64
		for _, ti := range sf.Tensors() {
			if ti.Begin < prevEnd || ti.End > int64(len(sf.data)) || ti.End-ti.Begin != ti.NumElements()*ti.DType.Size() {
				t.Fatalf("accepted an inconsistent tensor %+v (data %d bytes)", ti, len(sf.data))
			}
			prevEnd = ti.End
			if _, _, err := sf.Bytes(ti.Name); err != nil {
				t.Fatal(err)
			}
		}
	})
}
