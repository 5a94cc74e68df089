// Package tinymodel writes small random Llama checkpoints (a Hugging Face folder:
// config.json and model.safetensors, float32) for tests that need a model of a given
// shape and no particular values — long sequences, large vocabularies — where generating
// one with torch in the oracle would be slow or pointless. Tests that compare values with
// transformers use models transformers wrote (testdata/forward/gen.py).
package tinymodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/formats/safetensors"
)

// Sizes are the dimensions of a Llama model.
type Sizes struct {
	Vocab, Hidden, Inter, Layers, Heads, KVHeads, MaxPositions int
}

// WriteLlama writes a Llama model of the given sizes into dir (created), its weights
// uniform in ±0.1 from a fixed generator.
func WriteLlama(dir string, s Sizes) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := map[string]any{"model_type": "llama", "architectures": []string{"LlamaForCausalLM"}, "vocab_size": s.Vocab,
		"hidden_size": s.Hidden, "intermediate_size": s.Inter, "num_hidden_layers": s.Layers, "num_attention_heads": s.Heads,
		"num_key_value_heads": s.KVHeads, "max_position_embeddings": s.MaxPositions, "rms_norm_eps": 1e-6,
		"tie_word_embeddings": false}
	b, err := json.MarshalIndent(cfg, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	D := s.Hidden / s.Heads
	type tensor struct {
		name  string
		shape []int64
		norm  bool
	}
	ts := []tensor{{"model.embed_tokens.weight", []int64{int64(s.Vocab), int64(s.Hidden)}, false}}
	for i := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			tensor{p + "input_layernorm.weight", []int64{int64(s.Hidden)}, true},
			tensor{p + "self_attn.q_proj.weight", []int64{int64(s.Heads * D), int64(s.Hidden)}, false},
			tensor{p + "self_attn.k_proj.weight", []int64{int64(s.KVHeads * D), int64(s.Hidden)}, false},
			tensor{p + "self_attn.v_proj.weight", []int64{int64(s.KVHeads * D), int64(s.Hidden)}, false},
			tensor{p + "self_attn.o_proj.weight", []int64{int64(s.Hidden), int64(s.Heads * D)}, false},
			tensor{p + "post_attention_layernorm.weight", []int64{int64(s.Hidden)}, true},
			tensor{p + "mlp.gate_proj.weight", []int64{int64(s.Inter), int64(s.Hidden)}, false},
			tensor{p + "mlp.up_proj.weight", []int64{int64(s.Inter), int64(s.Hidden)}, false},
			tensor{p + "mlp.down_proj.weight", []int64{int64(s.Hidden), int64(s.Inter)}, false})
	}
	ts = append(ts, tensor{"model.norm.weight", []int64{int64(s.Hidden)}, true},
		tensor{"lm_head.weight", []int64{int64(s.Vocab), int64(s.Hidden)}, false})
	infos := make([]safetensors.TensorInfo, len(ts))
	for i, t := range ts {
		infos[i] = safetensors.TensorInfo{Name: t.name, DType: "F32", Shape: t.shape}
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := safetensors.NewWriter(f, infos, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	seed := uint64(1)
	for _, t := range ts {
		n := int64(1)
		for _, d := range t.shape {
			n *= d
		}
		if err := w.WriteTensor(t.name, uniform{n: n, seed: &seed, norm: t.norm}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// uniform writes n float32 values from a linear congruential generator: ±0.1, or 1 ± 0.1
// for a norm's weight.
type uniform struct {
	n    int64
	seed *uint64
	norm bool
}

func (u uniform) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 0, 1<<16)
	var done int64
	for i := int64(0); i < u.n; i++ {
		*u.seed = *u.seed*6364136223846793005 + 1442695040888963407
		v := float32(*u.seed>>40)/float32(1<<24)*0.2 - 0.1
		if u.norm {
			v++
		}
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) == cap(buf) || i == u.n-1 {
			k, err := w.Write(buf)
			done += int64(k)
			if err != nil {
				return done, err
			}
			buf = buf[:0]
		}
	}
	return done, nil
}
