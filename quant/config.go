package quant

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// The quantization methods ckpt recognizes, as config.json's quantization_config
// spells quant_method.
const (
	// MethodFP8 is DeepSeek-V3-style block FP8, which transformers loads as
	// FineGrainedFP8: weight float8_e4m3fn + weight_scale_inv (a multiplier).
	MethodFP8 = "fp8"
	// MethodFBGEMM is fbgemm_fp8: per-row (experts: per-column) float32 weight_scale.
	MethodFBGEMM = "fbgemm_fp8"
	// MethodCompressedTensors is llm-compressor's compressed-tensors (FP8
	// float-quantized, NVFP4 nvfp4-pack-quantized).
	MethodCompressedTensors = "compressed-tensors"
	// MethodModelOpt is NVIDIA TensorRT Model Optimizer (FP8, NVFP4, mixed).
	MethodModelOpt = "modelopt"
	// MethodMXFP4 is gpt-oss MXFP4: *_blocks + *_scales of the MoE experts.
	MethodMXFP4 = "mxfp4"
)

// The files a quantization config lives in, relative to a Hugging Face folder.
const (
	ConfigFile      = "config.json"
	HFQuantConfFile = "hf_quant_config.json"
)

// Config is the quantization configuration of a checkpoint, merged from
// config.json's quantization_config (compression_config in old compressed-tensors
// files) and ModelOpt's hf_quant_config.json. It says how the stored codes and
// scales make values; which tensors are quantized is then read from their names,
// dtypes and shapes (see [Detect]).
type Config struct {
	// Method is quant_method as written ("fp8", "compressed-tensors", …); ModelOpt's
	// hf_quant_config.json alone gives "modelopt".
	Method string
	// Files lists where the configuration was found: ConfigFile, HFQuantConfFile or
	// both. Dequantizing everything removes it from all of them.
	Files []string
	// BlockSize is "fp8"'s weight_block_size [rows, cols]: transformers' default
	// [128, 128] when absent, nil when null (one scale per tensor).
	BlockSize []int64
	// Format is compressed-tensors' top-level format ("float-quantized",
	// "nvfp4-pack-quantized", …).
	Format string
	// Algo is ModelOpt's quant_algo, upper-cased ("FP8", "NVFP4",
	// "MIXED_PRECISION", …).
	Algo string
	// LayerAlgos maps module names to their quant_algo (upper-cased) for ModelOpt
	// MIXED_PRECISION checkpoints (hf_quant_config.json quantized_layers).
	LayerAlgos map[string]string
	// Groups are compressed-tensors' config_groups, in name order.
	Groups []CTGroup
}

// CTGroup is one compressed-tensors config group: the weight quantization
// arguments ckpt needs to tell strategies apart.
type CTGroup struct {
	Name string
	// Format overrides the config's top-level format for this group when set.
	Format string
	// Type is "float" or "int"; NumBits the code width.
	Type    string
	NumBits int
	// Strategy is "tensor", "channel", "group", "block" or "tensor_group".
	Strategy string
	// GroupSize is set for the group strategies; BlockStructure [rows, cols] for block.
	GroupSize      int64
	BlockStructure []int64
}

// LoadConfig reads the quantization configuration of a Hugging Face folder from
// the files among ck.Extras. It returns nil, nil when there is none (single files
// carry no config).
func LoadConfig(ck *statedict.Checkpoint) (*Config, error) {
	var cfg, hq []byte
	for _, name := range ck.Extras {
		var dst *[]byte
		switch name {
		case ConfigFile:
			dst = &cfg
		case HFQuantConfFile:
			dst = &hq
		default:
			continue
		}
		b, err := ck.ReadFile(name)
		if err != nil {
			return nil, err
		}
		*dst = b
	}
	c, err := ParseConfig(cfg, hq)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, inputError(err))
	}
	return c, nil
}

// rawQuant is the union of the quantization_config keys ckpt reads.
type rawQuant struct {
	QuantMethod     string                  `json:"quant_method"`
	WeightBlockSize json.RawMessage         `json:"weight_block_size"`
	Format          string                  `json:"format"`
	QuantAlgo       string                  `json:"quant_algo"`
	ConfigGroups    map[string]rawCTGroup   `json:"config_groups"`
	QuantizedLayers map[string]rawLayerAlgo `json:"quantized_layers"`
}

type rawCTGroup struct {
	Format  string `json:"format"`
	Weights *struct {
		NumBits        int     `json:"num_bits"`
		Type           string  `json:"type"`
		Strategy       string  `json:"strategy"`
		GroupSize      *int64  `json:"group_size"`
		BlockStructure []int64 `json:"block_structure"`
	} `json:"weights"`
}

type rawLayerAlgo struct {
	QuantAlgo string `json:"quant_algo"`
}

// ParseConfig merges the contents of config.json and hf_quant_config.json (either
// may be nil) into a Config, or returns nil when neither declares quantization.
func ParseConfig(configJSON, hfQuantJSON []byte) (*Config, error) {
	var c *Config
	if configJSON != nil {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(configJSON, &top); err != nil {
			return nil, fmt.Errorf("%s: %w", ConfigFile, err)
		}
		for _, key := range []string{"quantization_config", "compression_config"} {
			b, ok := top[key]
			if !ok || string(b) == "null" {
				continue
			}
			var rq rawQuant
			if err := json.Unmarshal(b, &rq); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", ConfigFile, key, err)
			}
			c = fromRaw(&rq)
			if c.Method == MethodFP8 {
				// transformers' FineGrainedFP8Config defaults to 128×128 blocks; an explicit
				// null means one scale per tensor.
				c.BlockSize = []int64{128, 128}
				if rq.WeightBlockSize != nil {
					c.BlockSize = nil
					if err := json.Unmarshal(rq.WeightBlockSize, &c.BlockSize); err != nil || c.BlockSize != nil && len(c.BlockSize) != 2 {
						return nil, fmt.Errorf("%s: weight_block_size %s is not [rows, cols]", ConfigFile, rq.WeightBlockSize)
					}
				}
			}
			if c.Method == "" && len(rq.ConfigGroups) > 0 {
				c.Method = MethodCompressedTensors // old compression_config omits it
			}
			if c.Method == "" {
				return nil, fmt.Errorf("%s: %s has no quant_method", ConfigFile, key)
			}
			c.Files = []string{ConfigFile}
			break
		}
	}
	if hfQuantJSON != nil {
		var hq struct {
			Quantization *rawQuant `json:"quantization"`
		}
		if err := json.Unmarshal(hfQuantJSON, &hq); err != nil {
			return nil, fmt.Errorf("%s: %w", HFQuantConfFile, err)
		}
		if hq.Quantization == nil {
			return nil, fmt.Errorf("%s: no \"quantization\" object", HFQuantConfFile)
		}
		// ModelOpt writes both files; hf_quant_config.json is the one with the per-layer
		// algorithms of mixed checkpoints, so its algorithm wins.
		m := fromRaw(hq.Quantization)
		m.Method = MethodModelOpt
		switch {
		case c == nil:
			c = m
		case c.Method != MethodModelOpt:
			return nil, fmt.Errorf("%s says quant_method %q but %s (ModelOpt's) is present too", ConfigFile, c.Method, HFQuantConfFile)
		default:
			if m.Algo != "" {
				c.Algo = m.Algo
			}
			if m.LayerAlgos != nil {
				c.LayerAlgos = m.LayerAlgos
			}
		}
		c.Files = append(c.Files, HFQuantConfFile)
	}
	return c, nil
}

func fromRaw(rq *rawQuant) *Config {
	c := &Config{Method: rq.QuantMethod, Format: rq.Format, Algo: strings.ToUpper(rq.QuantAlgo)}
	if len(rq.QuantizedLayers) > 0 {
		c.LayerAlgos = map[string]string{}
		for name, l := range rq.QuantizedLayers {
			c.LayerAlgos[name] = strings.ToUpper(l.QuantAlgo)
		}
	}
	names := make([]string, 0, len(rq.ConfigGroups))
	for name := range rq.ConfigGroups {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		g := rq.ConfigGroups[name]
		cg := CTGroup{Name: name, Format: g.Format}
		if w := g.Weights; w != nil {
			cg.Type, cg.NumBits, cg.Strategy, cg.BlockStructure = w.Type, w.NumBits, w.Strategy, w.BlockStructure
			if w.GroupSize != nil {
				cg.GroupSize = *w.GroupSize
			}
		}
		c.Groups = append(c.Groups, cg)
	}
	return c
}

// ctFormats lists the compressed-tensors formats in use: the top-level one and
// every group's own.
func (c *Config) ctFormats() []string {
	var out []string
	if c.Format != "" {
		out = append(out, c.Format)
	}
	for _, g := range c.Groups {
		if g.Format != "" && !slices.Contains(out, g.Format) {
			out = append(out, g.Format)
		}
	}
	return out
}

// StripConfig returns config.json without its quantization configuration
// (quantization_config, or compression_config of old compressed-tensors files),
// for a checkpoint whose tensors were all dequantized: transformers then loads it
// as a plain model. Keys are written sorted with two-space indentation, as
// transformers' save_pretrained writes them.
func StripConfig(configJSON []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	delete(top, "quantization_config")
	delete(top, "compression_config")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(top); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
