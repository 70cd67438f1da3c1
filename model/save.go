package model

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

var gotchToST = map[gotch.DType]STDType{gotch.Float: "F32", gotch.BFloat16: "BF16", gotch.Half: "F16", gotch.Double: "F64"}

// companionFiles are copied from the directory a model was loaded from, so
// a saved checkpoint is a complete HF model directory.
var companionFiles = []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json"}

// Save writes the model as a Hugging Face directory: model.safetensors (the
// parameters in their dtype, one tensor at a time, laid out as transformers
// writes it), config.json (as loaded, with torch_dtype set to the saved
// dtype) and the tokenizer and generation files of the source directory.
func (m *Model) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stType, ok := gotchToST[m.DType]
	if !ok {
		return fmt.Errorf("save %s: dtype %v has no safetensors name", dir, m.DType)
	}
	var srcs []TensorSource
	for _, p := range m.params {
		p := p
		srcs = append(srcs, TensorSource{Name: p.Name, DType: stType, Shape: p.Tensor.MustSize(), Write: func(w io.Writer) error {
			b, err := csrc.ToBytes(p.Tensor)
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		}})
	}
	if err := WriteSafetensors(filepath.Join(dir, singleFile), srcs, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	var raw map[string]any
	if err := json.Unmarshal(m.rawConfig, &raw); err != nil {
		return fmt.Errorf("save %s: config: %w", dir, err)
	}
	raw["torch_dtype"] = csrc.DTypeName(m.DType)
	cfg, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.json"), append(cfg, '\n')); err != nil {
		return err
	}
	for _, name := range companionFiles {
		b, err := os.ReadFile(filepath.Join(m.sourceDir, name))
		if os.IsNotExist(err) || m.sourceDir == "" || filepath.Clean(m.sourceDir) == filepath.Clean(dir) {
			continue
		}
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return fsutil.SyncDir(dir)
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// EOSTokenIDs are the ids that end generation by default, as transformers'
// generate() uses them: generation_config.json's eos_token_id (an id or a
// list) together with config.json's, sorted, without repeats.
func (m *Model) EOSTokenIDs() ([]int64, error) {
	ids, err := m.Config.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(m.sourceDir, "generation_config.json")
	if b, err := os.ReadFile(path); err == nil && m.sourceDir != "" {
		var gen Config // the same eos_token_id field and forms
		if err := json.Unmarshal(b, &gen); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		more, err := gen.EOSTokenIDs()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ids = append(ids, more...)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
