package megatron

import (
	"fmt"
	"math/big"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// runArgs are the arguments of a Megatron run (its saved argparse.Namespace) that decide how
// its ranks hold the model and its optimizer state.
type runArgs struct {
	tp, pp                     int64
	layers, hidden, ffn        int64
	heads, groups, kv          int64
	outputGate                 bool // attention_output_gate: each group also holds a gate per query head
	swiglu                     bool
	tied                       bool // untie_embeddings_and_output_weights unset
	padded, vocab              int64
	distributed                bool // use_distributed_optimizer
	bucketSize, buckets        int64
	overlapGrad, overlapParams bool
	dpcp                       int64 // data × context parallel ranks, for the default bucket size
	wdQKNorm                   bool  // apply_wd_to_qk_layernorm

	// fields are the raw values read, by name, so that the ranks' args can be compared.
	fields []argField
}

type argField struct {
	name  string
	value statedict.Value
}

// args reads the fields of a Namespace's attributes; a missing field reads as None.
type args struct {
	attrs  *statedict.Dict
	fields []argField
	err    error
}

func (a *args) get(name string) statedict.Value {
	v, _ := a.attrs.Get(name)
	a.fields = append(a.fields, argField{name, v})
	return v
}

// int reads a required positive int no larger than limit.
func (a *args) int(name string, limit int64) int64 {
	n, ok := a.optInt(name, limit)
	if !ok && a.err == nil {
		a.err = fmt.Errorf("args.%s is %s, not a positive int", name, describe(a.get(name)))
	}
	return n
}

// optInt reads an int that may be None (ok false, no error) but is positive and bounded
// when set.
func (a *args) optInt(name string, limit int64) (int64, bool) {
	v := a.get(name)
	if v == nil {
		return 0, false
	}
	n, ok := v.(int64)
	if !ok || n <= 0 || n > limit {
		if a.err == nil {
			a.err = fmt.Errorf("args.%s is %s, not a positive int of at most %d", name, describe(v), limit)
		}
		return 0, false
	}
	return n, true
}

// bool reads a flag that may be None (false).
func (a *args) bool(name string) bool {
	switch v := a.get(name).(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		if a.err == nil {
			a.err = fmt.Errorf("args.%s is %s, not a bool", name, describe(v))
		}
		return false
	}
}

// describe renders a value of args for a message without printing anything large.
func describe(v statedict.Value) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool, int64, float64:
		return fmt.Sprint(x)
	case *big.Int:
		return "an int beyond 64 bits"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("a %T", v)
}

// maxLayerSize bounds a model dimension read from args.
const maxLayerSize = 1 << 40

// parseArgs reads a rank file's args: what the merge needs, validated; layouts it cannot
// merge (virtual pipeline stages, expert parallelism, a pipeline layout) are refused.
func parseArgs(v statedict.Value) (*runArgs, error) {
	o, ok := v.(*statedict.Object)
	if !ok || o.Class != "argparse.Namespace" {
		return nil, fmt.Errorf("%w: args is %s, not the argparse.Namespace Megatron saves", ckpterr.ErrCorrupt, describe(v))
	}
	data, _, ok, err := o.Data()
	attrs, isDict := data.(*statedict.Dict)
	if err != nil || !ok || !isDict {
		return nil, fmt.Errorf("%w: args is not a record of attributes", ckpterr.ErrCorrupt)
	}
	a := &args{attrs: attrs}
	r := &runArgs{}
	r.tp = a.int("tensor_model_parallel_size", maxRanks)
	r.pp = a.int("pipeline_model_parallel_size", maxRanks)
	r.layers = a.int("num_layers", maxLayerSize)
	r.hidden = a.int("hidden_size", maxLayerSize)
	r.ffn = a.int("ffn_hidden_size", maxLayerSize)
	r.heads = a.int("num_attention_heads", maxLayerSize)
	r.groups = r.heads
	if a.bool("group_query_attention") {
		r.groups = a.int("num_query_groups", maxLayerSize)
	}
	if kv, ok := a.optInt("kv_channels", maxLayerSize); ok {
		r.kv = kv
	} else if r.heads > 0 {
		r.kv = r.hidden / r.heads
	}
	r.outputGate = a.bool("attention_output_gate")
	r.swiglu = a.bool("swiglu")
	r.tied = !a.bool("untie_embeddings_and_output_weights")
	r.padded = a.int("padded_vocab_size", maxLayerSize)
	r.vocab, _ = a.optInt("vocab_size", maxLayerSize)
	r.distributed = a.bool("use_distributed_optimizer")
	r.overlapGrad = a.bool("overlap_grad_reduce")
	r.overlapParams = a.bool("overlap_param_gather_with_optimizer_step")
	r.bucketSize, _ = a.optInt("ddp_bucket_size", maxLayerSize)
	r.buckets, _ = a.optInt("ddp_num_buckets", maxLayerSize)
	r.wdQKNorm = a.bool("apply_wd_to_qk_layernorm")
	ws, hasWS := a.optInt("world_size", maxRanks*maxRanks)
	dp, hasDP := a.optInt("data_parallel_size", maxRanks*maxRanks)
	cp, hasCP := a.optInt("context_parallel_size", maxRanks)
	if !hasCP {
		cp = 1
	}
	switch {
	case hasDP:
		r.dpcp = dp * cp
	case hasWS && r.tp > 0 && r.pp > 0:
		r.dpcp = max(ws/(r.tp*r.pp), 1)
	default:
		r.dpcp = 1
	}
	vpp := a.get("virtual_pipeline_model_parallel_size")
	ep, hasEP := a.optInt("expert_model_parallel_size", maxRanks)
	experts, hasExperts := a.optInt("num_experts", maxLayerSize)
	layout := a.get("pipeline_model_parallel_layout")
	format := a.get("ckpt_format")
	if a.err != nil {
		return nil, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, a.err)
	}
	r.fields = a.fields
	switch {
	case vpp != nil && vpp != int64(1):
		return nil, fmt.Errorf("%w: virtual pipeline stages (args.virtual_pipeline_model_parallel_size %s): each rank holds interleaved layer chunks, which ckpt does not merge", ckpterr.ErrUnsupported, describe(vpp))
	case hasEP && ep > 1:
		return nil, fmt.Errorf("%w: expert parallelism (args.expert_model_parallel_size %d): ckpt merges dense GPT models only", ckpterr.ErrUnsupported, ep)
	case hasExperts && experts > 0:
		return nil, fmt.Errorf("%w: a mixture of experts (args.num_experts %d): ckpt merges dense GPT models only", ckpterr.ErrUnsupported, experts)
	case layout != nil:
		return nil, fmt.Errorf("%w: a custom pipeline layout (args.pipeline_model_parallel_layout): ckpt merges stages holding consecutive layers only", ckpterr.ErrUnsupported)
	case format != nil && format != "torch":
		return nil, fmt.Errorf("%w: args.ckpt_format is %s, but the folder holds per-rank model_optim_rng.pt files (ckpt_format torch)", ckpterr.ErrCorrupt, describe(format))
	case r.vocab > r.padded:
		return nil, fmt.Errorf("%w: args.vocab_size %d exceeds args.padded_vocab_size %d", ckpterr.ErrCorrupt, r.vocab, r.padded)
	}
	return r, nil
}

// agree reports the first field two ranks' args disagree on, "" when they agree.
func (r *runArgs) agree(o *runArgs) (field string, mine, theirs statedict.Value) {
	for i, f := range r.fields {
		if i >= len(o.fields) || o.fields[i].name != f.name {
			return f.name, f.value, nil
		}
		if eq, _ := equalValue(f.value, o.fields[i].value); !eq {
			return f.name, f.value, o.fields[i].value
		}
	}
	return "", nil, nil
}
