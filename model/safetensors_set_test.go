package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeShards(t *testing.T, dir string, shards map[string][]string, index string) {
	t.Helper()
	for shard, names := range shards {
		var srcs []TensorSource
		for _, n := range names {
			srcs = append(srcs, Bytes(n, "F32", []int64{1}, []byte{0, 0, 128, 63}))
		}
		if err := WriteSafetensors(filepath.Join(dir, shard), srcs, nil); err != nil {
			t.Fatal(err)
		}
	}
	if index != "" {
		if err := os.WriteFile(filepath.Join(dir, indexFile), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTensorSet(t *testing.T) {
	okIndex := `{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`
	shards := map[string][]string{"model-00001-of-00002.safetensors": {"a", "b"}, "model-00002-of-00002.safetensors": {"c"}}
	t.Run("single file", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]string{singleFile: {"x", "y"}}, "")
		s, err := OpenTensorSet(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := strings.Join(s.Names(), ","); got != "x,y" {
			t.Errorf("names %s", got)
		}
	})
	t.Run("sharded", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, shards, okIndex)
		s, err := OpenTensorSet(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := strings.Join(s.Names(), ","); got != "a,b,c" {
			t.Errorf("names %s", got)
		}
		if b, _, err := s.Bytes("c"); err != nil || len(b) != 4 {
			t.Errorf("Bytes(c) = %v, %v", b, err)
		}
		if _, _, err := s.Bytes("nope"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
			t.Errorf("missing tensor: %v", err)
		}
	})
	for _, c := range []struct {
		name   string
		shards map[string][]string
		index  string
		want   string
	}{
		{"no weights", nil, "", "no model.safetensors and no model.safetensors.index.json"},
		{"missing shard", map[string][]string{"model-00001-of-00002.safetensors": {"a", "b"}}, okIndex, "model-00002-of-00002.safetensors: no such file"},
		{"tensor not in its shard", map[string][]string{"model-00001-of-00002.safetensors": {"a"}, "model-00002-of-00002.safetensors": {"c", "b"}}, okIndex, `tensor "b" is assigned to model-00001-of-00002.safetensors`},
		{"bad index", shards, `{"weight_map":`, indexFile},
		{"shard path escapes", shards, `{"weight_map":{"a":"../x.safetensors"}}`, "must be a file name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeShards(t, dir, c.shards, c.index)
			s, err := OpenTensorSet(dir)
			if err == nil {
				s.Close()
				t.Fatalf("accepted; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q, want it to contain %q", err, c.want)
			}
		})
	}
}
