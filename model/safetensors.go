package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"syscall"

	"github.com/sugarme/gotch"
)

// safetensors: an 8-byte little-endian header length N, N bytes of JSON
// header, then the data buffer. The header maps tensor names to dtype, shape
// and [begin, end) offsets into the data buffer, plus an optional
// "__metadata__" string map. Everything in the header is checked before any
// byte of data is touched, so a truncated or hostile file is an error, never
// a crash.

// STDType is a safetensors dtype tag ("F32", "BF16", …).
type STDType string

// Element sizes of the dtypes lanpo reads and writes. Sub-byte and exotic
// tags are rejected by name.
var stDTypeSize = map[STDType]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"F64": 8, "I64": 8, "U64": 8,
}

// stDTypeRank is the dtype order of the reference implementation, which
// writes tensors sorted by dtype (descending), then name; lanpo writes the
// same order so its files are byte-identical to Python's.
var stDTypeRank = map[STDType]int{
	"BOOL": 0, "U8": 1, "I8": 2, "F8_E5M2": 3, "F8_E4M3": 4, "I16": 5, "U16": 6,
	"F16": 7, "BF16": 8, "I32": 9, "U32": 10, "F32": 11, "F64": 12, "I64": 13, "U64": 14,
}

// Size is the element size in bytes (0 for an unknown dtype).
func (d STDType) Size() int64 { return stDTypeSize[d] }

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType STDType
	Shape []int64
	Begin int64 // offset into the data buffer
	End   int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

const (
	maxHeaderBytes = 100 << 20 // the reference implementation's limit
	maxTensorRank  = 16
)

type headerEntry struct {
	DType       STDType `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// parseHeader validates a header against a data buffer of dataLen bytes and
// returns the tensors sorted by offset, and the metadata.
func parseHeader(header []byte, dataLen int64) ([]TensorInfo, map[string]string, error) {
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, errors.New("header is not a JSON object")
	}
	// Decode key by key so duplicate names are caught (encoding/json keeps
	// the last one silently).
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, errors.New("header is not a JSON object")
	}
	var tensors []TensorInfo
	var meta map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("header JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("header JSON: key %v is not a string", tok)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("tensor %q appears twice in the header", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("__metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var e headerEntry
		if err := dec.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		t, err := checkEntry(name, e, dataLen)
		if err != nil {
			return nil, nil, err
		}
		tensors = append(tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("header JSON: %w", err)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimRight(rest, " ")) != 0 {
		return nil, nil, errors.New("header has bytes after its JSON object")
	}
	sort.Slice(tensors, func(i, j int) bool {
		if tensors[i].Begin != tensors[j].Begin {
			return tensors[i].Begin < tensors[j].Begin
		}
		return tensors[i].End < tensors[j].End
	})
	for i := 1; i < len(tensors); i++ {
		if tensors[i].Begin < tensors[i-1].End {
			return nil, nil, fmt.Errorf("tensors %q and %q overlap in the data buffer", tensors[i-1].Name, tensors[i].Name)
		}
	}
	return tensors, meta, nil
}

func checkEntry(name string, e headerEntry, dataLen int64) (TensorInfo, error) {
	t := TensorInfo{Name: name, DType: e.DType, Shape: e.Shape}
	size := e.DType.Size()
	if size == 0 {
		return t, fmt.Errorf("tensor %q: unsupported dtype %q", name, e.DType)
	}
	if e.Shape == nil {
		return t, fmt.Errorf("tensor %q: no shape", name)
	}
	if len(e.Shape) > maxTensorRank {
		return t, fmt.Errorf("tensor %q: rank %d exceeds %d", name, len(e.Shape), maxTensorRank)
	}
	if len(e.DataOffsets) != 2 {
		return t, fmt.Errorf("tensor %q: data_offsets must be [begin, end], got %v", name, e.DataOffsets)
	}
	t.Begin, t.End = e.DataOffsets[0], e.DataOffsets[1]
	if t.Begin < 0 || t.End < t.Begin || t.End > dataLen {
		return t, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d-byte data buffer", name, t.Begin, t.End, dataLen)
	}
	// dtype × shape must equal the byte length; multiply with overflow checks.
	n := size
	for _, d := range e.Shape {
		if d < 0 {
			return t, fmt.Errorf("tensor %q: negative dimension in shape %v", name, e.Shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return t, fmt.Errorf("tensor %q: shape %v overflows", name, e.Shape)
		}
		n *= d
	}
	if n != t.End-t.Begin {
		return t, fmt.Errorf("tensor %q: %s × %v is %d bytes but data_offsets span %d", name, e.DType, e.Shape, n, t.End-t.Begin)
	}
	return t, nil
}

// File is an open, memory-mapped safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	tensors  []TensorInfo
	byName   map[string]int
	mapped   []byte // the whole file
	data     []byte // the data buffer within it
}

// OpenSafetensors maps path and validates its header.
func OpenSafetensors(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: %d bytes is too short for a safetensors file", path, size)
	}
	var mapped []byte
	if size > 0 {
		mapped, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("%s: mmap: %w", path, err)
		}
	}
	sf, err := newFile(path, mapped)
	if err != nil {
		syscall.Munmap(mapped)
		return nil, err
	}
	return sf, nil
}

func newFile(path string, b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%s: %d bytes is too short for a safetensors file", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeaderBytes || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%s: header length %d does not fit the %d-byte file (truncated or not safetensors)", path, n, len(b))
	}
	data := b[8+n:]
	tensors, meta, err := parseHeader(b[8:8+n], int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Path: path, Metadata: meta, tensors: tensors, byName: map[string]int{}, mapped: b, data: data}
	for i, t := range tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

// Tensors lists the file's tensors in data-buffer order.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Info returns the named tensor's description.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Bytes returns the named tensor's raw little-endian bytes, a view into the
// mapping that is valid until Close.
func (f *File) Bytes(name string) ([]byte, TensorInfo, error) {
	t, ok := f.Info(name)
	if !ok {
		return nil, t, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	return f.data[t.Begin:t.End:t.End], t, nil
}

// Close unmaps the file; byte views from Bytes become invalid.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	err := syscall.Munmap(f.mapped)
	f.mapped, f.data = nil, nil
	return err
}

// Gotch returns the libtorch dtype of a floating-point safetensors dtype.
func (d STDType) Gotch() (gotch.DType, error) {
	if g, ok := stToGotch[d]; ok {
		return g, nil
	}
	return 0, fmt.Errorf("safetensors dtype %s is not a floating-point type lanpo reads", d)
}

// STDTypeOf returns the safetensors tag of a floating-point libtorch dtype.
func STDTypeOf(d gotch.DType) (STDType, error) {
	if s, ok := gotchToST[d]; ok {
		return s, nil
	}
	return "", fmt.Errorf("dtype %v has no safetensors name", d)
}
