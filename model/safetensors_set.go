package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// TensorSet is every tensor of a Hugging Face model directory: one
// model.safetensors, or the shards listed in model.safetensors.index.json.
type TensorSet struct {
	Dir   string
	files []*File
	where map[string]*File
}

const (
	singleFile = "model.safetensors"
	indexFile  = "model.safetensors.index.json"
)

// OpenTensorSet opens dir's safetensors weights. With an index, every listed
// shard must exist and hold exactly the tensors the index assigns to it.
func OpenTensorSet(dir string) (*TensorSet, error) {
	s := &TensorSet{Dir: dir, where: map[string]*File{}}
	idxPath := filepath.Join(dir, indexFile)
	if b, err := os.ReadFile(idxPath); err == nil {
		if err := s.openSharded(idxPath, b); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	f, err := OpenSafetensors(filepath.Join(dir, singleFile))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s: no %s and no %s", dir, singleFile, indexFile)
		}
		return nil, err
	}
	s.files = []*File{f}
	for _, t := range f.Tensors() {
		s.where[t.Name] = f
	}
	return s, nil
}

func (s *TensorSet) openSharded(idxPath string, b []byte) error {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%s: weight_map is empty or missing", idxPath)
	}
	byShard := map[string][]string{}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard {
			return fmt.Errorf("%s: tensor %q: shard %q must be a file name in the same directory", idxPath, name, shard)
		}
		byShard[shard] = append(byShard[shard], name)
	}
	shards := make([]string, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	sort.Strings(shards)
	for _, sh := range shards {
		f, err := OpenSafetensors(filepath.Join(s.Dir, sh))
		if err != nil {
			return fmt.Errorf("shard listed in %s: %w", idxPath, err)
		}
		s.files = append(s.files, f)
		for _, name := range byShard[sh] {
			if _, ok := f.Info(name); !ok {
				return fmt.Errorf("%s: tensor %q is assigned to %s, which does not contain it", idxPath, name, sh)
			}
			s.where[name] = f
		}
		for _, t := range f.Tensors() {
			if idx.WeightMap[t.Name] != sh {
				return fmt.Errorf("%s: holds tensor %q, which %s does not assign to it", f.Path, t.Name, idxPath)
			}
		}
	}
	return nil
}

// Names lists every tensor name, sorted.
func (s *TensorSet) Names() []string {
	names := make([]string, 0, len(s.where))
	for n := range s.where {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Bytes returns the named tensor's bytes and description.
func (s *TensorSet) Bytes(name string) ([]byte, TensorInfo, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, TensorInfo{}, fmt.Errorf("%s: no tensor %q", s.Dir, name)
	}
	return f.Bytes(name)
}

// Close unmaps every file.
func (s *TensorSet) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.files = nil
	return first
}
