package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// configDType makes the output folder's config.json name the dtype --dtype cast the weights
// to: transformers loads a model in the dtype its config names (from_pretrained(dtype="auto")),
// so a bfloat16 checkpoint whose config still says float32 would be upcast back on load. It
// rewrites "dtype" (transformers 5) and "torch_dtype" (earlier versions) wherever they name
// a floating dtype, in the top-level config and its sub-configs (text_config, …), composing
// with rewrites already planned (a removed quantization config). It returns the old dtype
// when it changed one.
func configDType(ck *statedict.Checkpoint, rewrite map[string][]byte, dtype statedict.DType) (string, error) {
	if dtype == statedict.Invalid || !slices.Contains(ck.Extras, quant.ConfigFile) {
		return "", nil
	}
	src, planned := rewrite[quant.ConfigFile]
	if !planned {
		var err error
		if src, err = ck.ReadFile(quant.ConfigFile); err != nil {
			return "", err
		}
	} else if src == nil {
		return "", nil // left out
	}
	var top map[string]any
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return "", fmt.Errorf("%s: %w", quant.ConfigFile, err)
	}
	old := ""
	var set func(m map[string]any)
	set = func(m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case string:
				if (k == "dtype" || k == "torch_dtype") && floatDTypeName(x) && x != dtype.String() {
					old, m[k] = x, dtype.String()
				}
			case map[string]any:
				if k != "quantization_config" && k != "compression_config" {
					set(x)
				}
			}
		}
	}
	set(top)
	if old == "" {
		return "", nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(top); err != nil {
		return "", err
	}
	rewrite[quant.ConfigFile] = buf.Bytes()
	return old, nil
}

// floatDTypeName reports whether a config's dtype string names a floating torch dtype.
func floatDTypeName(s string) bool {
	switch s {
	case "float16", "bfloat16", "float32", "float64", "float", "half", "double":
		return true
	}
	return false
}
