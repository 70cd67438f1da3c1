package trainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/model"
)

// ExportOptions are lanpo export's: the LoRA checkpoint (or any PEFT
// adapter directory), the base model ("": the adapter's
// base_model_name_or_path), where to write, and whether to merge.
type ExportOptions struct {
	Adapter, Base, Out string
	// Merge writes a full Hugging Face model with W ← W + s·B·A in the
	// base's dtype (DType overrides it); otherwise the adapter alone, as
	// PEFT and vLLM read it.
	Merge bool
	DType string
}

// Export writes a LoRA checkpoint for use outside lanpo: the merged model
// (config.json, model.safetensors, generation_config.json) or the adapter
// (adapter_config.json, adapter_model.safetensors), each with the
// checkpoint's tokenizer and chat template. Out must not exist or be
// empty.
func Export(o ExportOptions) (string, error) {
	c, base, err := model.ReadAdapterConfig(o.Adapter)
	if err != nil {
		return "", err
	}
	if o.Base != "" {
		base = o.Base
	}
	if entries, err := os.ReadDir(o.Out); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("%s exists and is not empty: name a new directory", o.Out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(base, "config.json")); err != nil {
		return "", fmt.Errorf("the base model %q (%s) is not a model directory here: pass --base DIR", base, baseWhere(o))
	}
	var opt model.LoadOptions
	if o.DType != "" {
		if opt.DType, err = csrc.ParseDType(o.DType); err != nil {
			return "", fmt.Errorf("--dtype: %w", err)
		}
	} else if cfg, err := model.LoadConfig(filepath.Join(base, "config.json")); err == nil && cfg.TorchDType != "" {
		opt.DType, _ = csrc.ParseDType(cfg.TorchDType) // the base's own precision, merged once
	}
	m, err := model.LoadWithAdapter(base, o.Adapter, opt)
	if err != nil {
		return "", err
	}
	defer m.Close()
	what := fmt.Sprintf("adapter (r %d, %d target modules)", c.R, len(c.TargetModules))
	if o.Merge {
		if err := m.MergeLoRA(); err != nil {
			return "", err
		}
		if err := m.Save(o.Out); err != nil {
			return "", err
		}
		what = fmt.Sprintf("merged model (%s, r %d adapters folded in)", csrc.DTypeName(m.DType), c.R)
	} else if err := m.SaveAdapter(o.Out, base); err != nil {
		return "", err
	}
	// The checkpoint's tokenizer files (what the run trained with) win over
	// the base's, which a merged model has from Save; a bare PEFT adapter
	// has none, and then the adapter alone gets the base's, where it has
	// them.
	files, err := readTokenizerFiles(o.Adapter)
	if err != nil && !o.Merge {
		files, _ = readTokenizerFiles(base)
	}
	for _, f := range files {
		if err := fsutil.WriteFileSync(filepath.Join(o.Out, f.name), f.data); err != nil {
			return "", err
		}
	}
	return what, nil
}

func baseWhere(o ExportOptions) string {
	if o.Base != "" {
		return "--base"
	}
	return filepath.Join(o.Adapter, model.AdapterConfigFile) + " base_model_name_or_path"
}
