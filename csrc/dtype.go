package csrc

import (
	"fmt"

	"github.com/sugarme/gotch"
)

// dtypeNames are the names Hugging Face configs and PyTorch use.
var dtypeNames = []struct {
	name  string
	dtype gotch.DType
}{
	{"float32", gotch.Float}, {"bfloat16", gotch.BFloat16}, {"float16", gotch.Half}, {"float64", gotch.Double},
}

// ParseDType maps "float32", "bfloat16", "float16" or "float64" (also
// "fp32", "bf16", "fp16", "fp64") to a gotch dtype.
func ParseDType(name string) (gotch.DType, error) {
	aliases := map[string]string{"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp64": "float64", "double": "float64", "float": "float32"}
	if a, ok := aliases[name]; ok {
		name = a
	}
	for _, d := range dtypeNames {
		if d.name == name {
			return d.dtype, nil
		}
	}
	return 0, fmt.Errorf("dtype %q: want float32, bfloat16, float16 or float64", name)
}

// DTypeName is the PyTorch-style name of d ("bfloat16").
func DTypeName(d gotch.DType) string {
	for _, n := range dtypeNames {
		if n.dtype == d {
			return n.name
		}
	}
	return d.String()
}
