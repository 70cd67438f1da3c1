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

// companionFiles are the files besides config and weights that make a
// Hugging Face model directory complete. Load reads them into memory, so a
// Save writes them even after the source directory is gone (a pruned
// checkpoint a run resumed from, for instance).
var companionFiles = []string{generationConfigFile, "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
	"special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json"}

const generationConfigFile = "generation_config.json"

// companion is one companion file's name and bytes.
type companion struct {
	name string
	data []byte
}

// readCompanions reads the companion files dir has.
func readCompanions(dir string) ([]companion, error) {
	var out []companion
	for _, name := range companionFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, companion{name, b})
	}
	return out, nil
}

// Save writes the model as a Hugging Face directory: model.safetensors (the
// parameters in their dtype, one tensor at a time, laid out as transformers
// writes it), config.json (as loaded, with torch_dtype set to the saved
// dtype), the tokenizer and other companion files the model was loaded
// with, and generation_config.json (the source's, or one derived from
// config.json as transformers derives it).
func (m *Model) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stType, ok := gotchToST[m.DType]
	if !ok {
		return fmt.Errorf("save %s: dtype %v has no safetensors name", dir, m.DType)
	}
	if err := writeParams(filepath.Join(dir, singleFile), m.params, stType); err != nil {
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
	files := m.companions
	if m.companion(generationConfigFile) == nil {
		gen, err := m.derivedGenerationConfig()
		if err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
		files = append(files, companion{generationConfigFile, gen})
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return fsutil.SyncDir(dir)
}

// writeParams writes params to a safetensors file as PyTorch's
// save_file does, each tensor streamed from its device as it is written.
func writeParams(path string, params []NamedParam, st STDType) error {
	var srcs []TensorSource
	for _, p := range params {
		p := p
		srcs = append(srcs, TensorSource{Name: p.Name, DType: st, Shape: p.Tensor.MustSize(), Write: func(w io.Writer) error {
			b, err := csrc.ToBytes(p.Tensor)
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		}})
	}
	return WriteSafetensors(path, srcs, map[string]string{"format": "pt"})
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

// companion returns the named companion file's bytes, or nil.
func (m *Model) companion(name string) []byte {
	for _, f := range m.companions {
		if f.name == name {
			return f.data
		}
	}
	return nil
}

// derivedGenerationConfig is what transformers writes for a model without
// a generation_config.json: the special token ids of config.json.
func (m *Model) derivedGenerationConfig() ([]byte, error) {
	gen := map[string]any{"_from_model_config": true}
	if m.Config.BOSTokenID != nil {
		gen["bos_token_id"] = *m.Config.BOSTokenID
	}
	if len(m.Config.EOSTokenID) > 0 && string(m.Config.EOSTokenID) != "null" {
		gen["eos_token_id"] = m.Config.EOSTokenID
	}
	b, err := json.MarshalIndent(gen, "", "  ")
	return append(b, '\n'), err
}

// EOSTokenIDs are the ids that end generation by default, as transformers'
// generate() uses them: generation_config.json's eos_token_id (an id or a
// list) together with config.json's, sorted, without repeats.
func (m *Model) EOSTokenIDs() ([]int64, error) {
	ids, err := m.Config.EOSTokenIDs()
	if err != nil {
		return nil, err
	}
	if b := m.companion(generationConfigFile); b != nil {
		var gen Config // the same eos_token_id field and forms
		if err := json.Unmarshal(b, &gen); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(m.sourceDir, generationConfigFile), err)
		}
		more, err := gen.EOSTokenIDs()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(m.sourceDir, generationConfigFile), err)
		}
		ids = append(ids, more...)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
