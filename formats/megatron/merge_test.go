package megatron

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

const fixtures = "../../testdata/ecosystem/megatron/"

// openers read the rank files as torch.save archives (the formats package, which picks the
// reader by content, imports this one).
var openers = Openers{File: torchzip.Open}

// expectation is megatron.json: what torch says the saves merge to.
type expectation struct {
	Tensors listing    `json:"tensors"`
	Groups  [][]string `json:"groups"`
}

type tensorEntry struct {
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	SHA256 string  `json:"sha256"`
}

// listing is a JSON object of tensor entries, in file order.
type listing struct {
	Names   []string
	Entries map[string]tensorEntry
}

func (l *listing) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if _, err := d.Token(); err != nil {
		return err
	}
	l.Entries = map[string]tensorEntry{}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return err
		}
		var e tensorEntry
		if err := d.Decode(&e); err != nil {
			return err
		}
		l.Names = append(l.Names, k.(string))
		l.Entries[k.(string)] = e
	}
	return nil
}

func readExpected(t *testing.T) (map[string]expectation, []layoutCase) {
	t.Helper()
	b, err := os.ReadFile("../../testdata/ecosystem/megatron.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]expectation{}
	for _, name := range []string{"llama", "gpt"} {
		var e expectation
		if err := json.Unmarshal(raw[name], &e); err != nil || len(e.Tensors.Names) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = e
	}
	var layouts []layoutCase
	if err := json.Unmarshal(raw["layouts"], &layouts); err != nil || len(layouts) == 0 {
		t.Fatalf("layouts: %v", err)
	}
	return out, layouts
}

func digest(t *testing.T, x *statedict.Tensor) string {
	t.Helper()
	b, err := x.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestMergeFixtures: a Llama-style Megatron-core model and a GPT-2-style legacy model (tied
// embeddings), each saved by Megatron's legacy checkpointing at TP=1 and at TP=2 × PP=2
// with the distributed optimizer, the GPT model also at TP=2 alone and at TP=2 × PP=2
// without it (replicas of Megatron's layout, gen_megatron.py), merge to
// exactly the tensors torch computed for the TP=1 model: the weights at the real vocabulary
// size, and every parameter's step, fp32 main parameter and Adam moments — same names, same
// order, bit for bit — with the parameters in the groups Megatron built.
func TestMergeFixtures(t *testing.T) {
	want, _ := readExpected(t)
	for _, name := range []string{"llama_tp1", "llama_tp2pp2", "gpt_tp1", "gpt_tp2", "gpt_tp2pp2", "gpt_tp2pp2_nodist"} {
		t.Run(name, func(t *testing.T) {
			ck, err := Open(context.Background(), fixtures+name, openers)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Format != Legacy || len(ck.Ignored) != 0 {
				t.Errorf("format %s, ignored %v", ck.Format, ck.Ignored)
			}
			exp := want[strings.Split(name, "_")[0]]
			var got []string
			err = statedict.Walk(ck.Root, "", func(n string, v statedict.Value) error {
				x, ok := v.(*statedict.Tensor)
				if !ok || !(strings.HasPrefix(n, "model.") || strings.HasPrefix(n, "optimizer.")) {
					return nil
				}
				got = append(got, n)
				w, ok := exp.Tensors.Entries[n]
				if !ok {
					return nil
				}
				if x.DTypeName() != w.DType || !slices.Equal(x.Shape, w.Shape) || digest(t, x) != w.SHA256 {
					t.Errorf("%s: %s %v, torch's TP=1 model has %s %v (or other bytes)", n, x.DTypeName(), x.Shape, w.DType, w.Shape)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, exp.Tensors.Names) {
				t.Errorf("merged tensors\n%v\ntorch's TP=1 model\n%v", got, exp.Tensors.Names)
			}
			groups, _ := fieldPath(ck.Root.(*statedict.Dict), "optimizer", "param_groups").(*statedict.List)
			if groups == nil || len(groups.Items) != len(exp.Groups) {
				t.Fatalf("param_groups %v, want %d groups", groups, len(exp.Groups))
			}
			for i, g := range groups.Items {
				var params []string
				for _, p := range fieldPath(g.(*statedict.Dict), "params").(*statedict.List).Items {
					params = append(params, p.(string))
				}
				if !slices.Equal(params, exp.Groups[i]) {
					t.Errorf("param_groups[%d] lists %v, Megatron's group holds %v", i, params, exp.Groups[i])
				}
				if wd, _ := g.(*statedict.Dict).Get("wd_mult"); wd != float64(1-i) {
					t.Errorf("param_groups[%d] has wd_mult %v", i, wd)
				}
			}
		})
	}
}

// TestMergeKeepsPerRankState: entries the ranks hold alike are kept once; the RNG states,
// which differ per rank, are kept per rank folder — never one rank's given to all; args are
// the first rank's; Transformer Engine's extra state (the same on every rank) sits beside
// the model, which holds tensors only.
func TestMergeKeepsPerRankState(t *testing.T) {
	ck, err := Open(context.Background(), fixtures+"llama_tp2pp2", openers)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	root := ck.Root.(*statedict.Dict)
	var keys []string
	for _, e := range root.Entries() {
		keys = append(keys, e.Key.(string))
	}
	want := []string{"args", "checkpoint_version", "iteration", "model", ExtraStateKey, "optimizer", "opt_param_scheduler", "rng_state", "num_floating_point_operations_so_far"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	rng, ok := fieldPath(root, "rng_state").(*statedict.Dict)
	if !ok || rng.Len() != 4 {
		t.Fatalf("rng_state %v: want one per rank", fieldPath(root, "rng_state"))
	}
	for i, r := range []string{"mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"} {
		if rng.Entries()[i].Key != r {
			t.Errorf("rng_state entry %d is %v, want %s", i, rng.Entries()[i].Key, r)
		}
	}
	if v := fieldPath(root, "iteration"); v != int64(3) {
		t.Errorf("iteration %v", v)
	}
	extra := fieldPath(root, ExtraStateKey).(*statedict.Dict)
	if extra.Len() != 20 || extra.Entries()[0].Key != "decoder.layers.0.self_attention.core_attention._extra_state" {
		t.Errorf("%d extra states, first %v", extra.Len(), extra.Entries()[0].Key)
	}
	a, err := parseArgs(fieldPath(root, "args"))
	if err != nil || a.tp != 2 || a.pp != 2 {
		t.Errorf("args %+v %v", a, err)
	}
}

// TestMergeRefusals: saves the merge cannot prove it merges correctly are refused, naming
// the tensor, rank or file at fault: a replicated norm that differs on one rank (found when
// its bytes are read), a fused QKV whose rows do not divide into the args' query groups,
// ranks whose args disagree, a missing, an extra or a linked rank folder, a linked rank
// file, a rank without the distributed optimizer's file, and an optimizer buffer whose size
// does not fit the parameters.
func TestMergeRefusals(t *testing.T) {
	dir := t.TempDir()
	variant := func(name string, change func(iter string)) string {
		at := filepath.Join(dir, name)
		if err := os.CopyFS(at, os.DirFS(fixtures+"llama_tp2pp2")); err != nil {
			t.Fatal(err)
		}
		change(filepath.Join(at, "iter_0000003"))
		return at
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		src  string
		kind error
		says []string
		read bool // refused when the tensors are read, not when opened
	}{
		{fixtures + "hostile/replica", ckpterr.ErrCorrupt, []string{"decoder.layers.1.self_attention.linear_qkv.layer_norm_weight", "replicas differ", "mp_rank_01_000", "mp_rank_00_000", "element 3"}, true},
		{fixtures + "hostile/qkv_groups", ckpterr.ErrCorrupt, []string{"decoder.layers.0.self_attention.linear_qkv.weight", "16 rows on each of 2 tensor-parallel ranks", "4 query groups", "48 rows"}, false},
		{fixtures + "hostile/args", ckpterr.ErrCorrupt, []string{"args disagree", "args.num_layers is 4 on mp_rank_00_000, 6 on mp_rank_01_001"}, false},
		{variant("missing", func(it string) { must(os.RemoveAll(filepath.Join(it, "mp_rank_01_001"))) }), ckpterr.ErrCorrupt,
			[]string{"tensor parallel 2 × pipeline parallel 2 as its args record", "missing mp_rank_01_001"}, false},
		{variant("extra", func(it string) {
			must(os.CopyFS(filepath.Join(it, "mp_rank_02_000"), os.DirFS(filepath.Join(it, "mp_rank_01_000"))))
			must(os.CopyFS(filepath.Join(it, "mp_rank_00"), os.DirFS(filepath.Join(it, "mp_rank_01_000"))))
		}), ckpterr.ErrCorrupt, []string{"extra mp_rank_00, mp_rank_02_000"}, false},
		{variant("linked", func(it string) {
			r := filepath.Join(it, "mp_rank_01_001")
			must(os.Rename(r, filepath.Join(dir, "elsewhere")))
			must(os.Symlink(filepath.Join(dir, "elsewhere"), r))
		}), ckpterr.ErrCorrupt, []string{"mp_rank_01_001 is a link, not a rank folder"}, false},
		{variant("linked_file", func(it string) {
			f := filepath.Join(it, "mp_rank_01_001", RankFile)
			must(os.Remove(f))
			must(os.Symlink(filepath.Join(it, "mp_rank_00_001", RankFile), f))
		}), ckpterr.ErrCorrupt, []string{"mp_rank_00_001/model_optim_rng.pt and mp_rank_01_001/model_optim_rng.pt are the same file"}, false},
		{variant("no_optim", func(it string) { must(os.Remove(filepath.Join(it, "mp_rank_00_001", DistribOptimFile))) }), ckpterr.ErrCorrupt,
			[]string{"distrib_optim.pt missing from mp_rank_00_001"}, false},
		{variant("other_optim", func(it string) {
			// One stage's optimizer state given to the other.
			b, err := os.ReadFile(filepath.Join(it, "mp_rank_00_001", DistribOptimFile))
			must(err)
			must(os.WriteFile(filepath.Join(it, "mp_rank_00_000", DistribOptimFile), b, 0o644))
		}), ckpterr.ErrCorrupt, []string{"mp_rank_00_000/distrib_optim.pt", "buffer 0 (torch.bfloat16, torch.float32) holds", "laid out as DistributedOptimizer lays them"}, false},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.src), func(t *testing.T) {
			ck, err := Open(context.Background(), c.src, openers)
			if err == nil && c.read {
				err = statedict.Walk(ck.Root, "", func(n string, v statedict.Value) error {
					if x, ok := v.(*statedict.Tensor); ok {
						_, err := x.Bytes()
						return err
					}
					return nil
				})
				ck.Close()
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("%v, want %v", err, c.kind)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v\ndoes not say %q", err, s)
				}
			}
		})
	}
}

// layoutCase is one parameter layout of megatron.json, computed by megatron_tp.coalesced
// (Megatron's _compute_per_buffer_param_layout and get_parameter_state_dp_zero).
type layoutCase struct {
	Numel      []int64 `json:"numel"`
	Shared     []bool  `json:"shared"`
	BucketSize *int64  `json:"bucket_size"`
	Align      int64   `json:"align"`
	Starts     []int64 `json:"starts"`
	Total      int64   `json:"total"`
}

// TestBufferLayout: bufferLayout places parameters in the distributed optimizer's saved
// buffers where Megatron's own layout code does, for random parameter lists, shared
// embeddings at either end, bucket sizes from one element to none, both alignments.
func TestBufferLayout(t *testing.T) {
	_, cases := readExpected(t)
	for i, c := range cases {
		params := make([]layoutParam, len(c.Numel))
		for j := range params {
			params[j] = layoutParam{c.Numel[j], c.Shared[j]}
		}
		size := int64(noBuckets)
		if c.BucketSize != nil {
			size = *c.BucketSize
		}
		starts, total := bufferLayout(params, size, c.Align)
		if !slices.Equal(starts, c.Starts) || total != c.Total {
			t.Errorf("case %d (%+v): %v %d, Megatron's %v %d", i, c, starts, total, c.Starts, c.Total)
		}
	}
}

// floats is a contiguous float32 tensor of shape holding 0, 1, 2, … plus base.
func floats(shape []int64, base float32) *statedict.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(base+float32(i)))
	}
	st := statedict.NewMappedStorage("t", "cpu", statedict.Float32, b)
	return &statedict.Tensor{DType: statedict.Float32, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}
}

func values(t *testing.T, x *statedict.Tensor) []float32 {
	t.Helper()
	b, err := x.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestConcat: merged tensors read as torch.cat of the parts' slices along the merge
// dimension, in whole and at any offset; replicas are compared on every read.
func TestConcat(t *testing.T) {
	a, b := floats([]int64{2, 3}, 0), floats([]int64{2, 3}, 100)
	a.Storage.Location, b.Storage.Location = "cuda:0", "cuda:1" // as each rank saved them
	cat1, err := concat("w", 1, []part{{copyOf: copyOf{a, "r0"}, n: 3}, {copyOf: copyOf{b, "r1"}, n: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if cat1.Storage.Location != "cuda:0" {
		t.Errorf("merged on %s, the first rank saved on cuda:0", cat1.Storage.Location)
	}
	if got, want := values(t, cat1), []float32{0, 1, 2, 100, 101, 102, 3, 4, 5, 103, 104, 105}; !slices.Equal(got, want) || !slices.Equal(cat1.Shape, []int64{2, 6}) {
		t.Errorf("dim 1: %v %v, want %v", cat1.Shape, got, want)
	}
	// Halves: row 1 of each, then row 0 of each (a gated unit's layout), and a truncation.
	halves, err := concat("w", 0, []part{{copyOf: copyOf{a, "r0"}, from: 1, n: 1}, {copyOf: copyOf{b, "r1"}, from: 1, n: 1}, {copyOf: copyOf{a, "r0"}, n: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, halves), []float32{3, 4, 5, 103, 104, 105, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("dim 0 slices: %v, want %v", got, want)
	}
	// Any offset, any length.
	whole, _ := halves.Bytes()
	for off := range len(whole) {
		for n := 1; off+n <= len(whole); n += 5 {
			p := make([]byte, n)
			if k, err := halves.Storage.ReadAt(p, int64(off)); k != n || (err != nil && err != io.EOF) || !bytes.Equal(p, whole[off:off+n]) {
				t.Fatalf("ReadAt(%d, %d): %d %v", off, n, k, err)
			}
		}
	}
	// Replicas: equal ones read through, a differing one fails naming both ranks.
	same, err := concat("norm", 0, []part{{copyOf: copyOf{a, "r0"}, replicas: []copyOf{{floats([]int64{2, 3}, 0), "r1"}}, n: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, same); !slices.Equal(got, []float32{0, 1, 2, 3, 4, 5}) {
		t.Errorf("replicated: %v", got)
	}
	bad, _ := concat("norm", 0, []part{{copyOf: copyOf{a, "r0"}, replicas: []copyOf{{floats([]int64{2, 3}, 0), "r1"}, {floats([]int64{2, 3}, 0.5), "r2"}}, n: 2}})
	if _, err := bad.Bytes(); !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), "norm: corrupt checkpoint: replicas differ: the copy on r2 and the one on r0 disagree at element 0") {
		t.Errorf("differing replica: %v", err)
	}
	for _, c := range []struct {
		dim   int
		parts []part
		says  string
	}{
		{2, []part{{copyOf: copyOf{a, "r0"}, n: 1}}, "no dimension 2"},
		{0, []part{{copyOf: copyOf{a, "r0"}, from: 1, n: 2}}, "rows [1, 3) of the 2"},
		{0, []part{{copyOf: copyOf{a, "r0"}, n: 2}, {copyOf: copyOf{floats([]int64{2, 4}, 0), "r1"}, n: 2}}, "differ outside dimension 0"},
		{0, []part{{copyOf: copyOf{a, "r0"}, replicas: []copyOf{{floats([]int64{3, 2}, 0), "r1"}}, n: 2}}, "shape [3 2] on r1"},
	} {
		if _, err := concat("w", c.dim, c.parts); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v, want it to say %q", err, c.says)
		}
	}
}

// group is a saved param group's options.
func group(kv ...any) *statedict.Dict {
	d := statedict.NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// TestGroupRule: parameters go to the groups Megatron built for them — by wd_mult (either
// order), or, before wd_mult, the weight-decay group then the one with weight_decay 0 —
// biases and 1-D parameters without weight decay (q/k layernorms with it under
// apply_wd_to_qk_layernorm); groups whose parameters the saved state cannot tell are
// refused.
func TestGroupRule(t *testing.T) {
	for _, c := range []struct {
		name           string
		groups         []*statedict.Dict
		decay, noDecay int
		says           string
	}{
		{"core", []*statedict.Dict{group("wd_mult", 1.0, "lr_mult", 1.0, "is_expert_parallel", false), group("wd_mult", 0.0, "lr_mult", 1.0)}, 0, 1, ""},
		{"reversed", []*statedict.Dict{group("wd_mult", 0.0), group("wd_mult", 1.0)}, 1, 0, ""},
		{"decay only", []*statedict.Dict{group("wd_mult", 1.0)}, 0, -1, ""},
		{"before wd_mult", []*statedict.Dict{group("weight_decay", 0.1), group("weight_decay", 0.0)}, 0, 1, ""},
		{"lr_mult", []*statedict.Dict{group("wd_mult", 1.0), group("wd_mult", 1.0, "lr_mult", 0.5)}, 0, 0, "param_groups[1] (lr_mult"},
		{"experts", []*statedict.Dict{group("wd_mult", 1.0, "is_expert_parallel", true)}, 0, 0, "param_groups[0] (lr_mult, decoupled learning rate or expert parallel)"},
		{"decoupled", []*statedict.Dict{group("wd_mult", 1.0, "is_decoupled_lr", true)}, 0, 0, "param_groups[0]"},
		{"other wd", []*statedict.Dict{group("wd_mult", 0.5)}, 0, 0, "wd_mult 0.5"},
		{"two decay", []*statedict.Dict{group("wd_mult", 1.0), group("wd_mult", 1.0)}, 0, 0, "param_groups[1] has wd_mult 1"},
		{"three old", []*statedict.Dict{group(), group(), group("weight_decay", 0.0)}, 0, 0, "3 param_groups without wd_mult"},
		{"old, second decays", []*statedict.Dict{group("weight_decay", 0.1), group("weight_decay", 0.1)}, 0, 0, "without wd_mult"},
	} {
		d, n, err := groupRule(c.groups)
		if c.says != "" {
			if !errors.Is(err, ckpterr.ErrUnsupported) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, c.says)
			}
			continue
		}
		if err != nil || d != c.decay || n != c.noDecay {
			t.Errorf("%s: %d %d %v, want %d %d", c.name, d, n, err, c.decay, c.noDecay)
		}
	}
	for _, c := range []struct {
		name string
		ndim int
		qk   bool
		want int
	}{
		{"decoder.layers.0.mlp.linear_fc1.weight", 2, false, 0},
		{"decoder.layers.0.mlp.linear_fc1.bias", 1, false, 1},
		{"language_model.encoder.layers.0.self_attention.dense.bias", 1, false, 1},
		{"decoder.final_layernorm.weight", 1, false, 1},
		{"decoder.layers.0.self_attention.q_layernorm.weight", 1, false, 1},
		{"decoder.layers.0.self_attention.q_layernorm.weight", 1, true, 0},
		{"decoder.layers.0.self_attention.k_layernorm.weight", 1, true, 0},
		{"decoder.layers.0.input_layernorm.weight", 1, true, 1},
	} {
		if g, err := groupOf(c.name, c.ndim, c.qk, 0, 1); g != c.want || err != nil {
			t.Errorf("%s (qk %v): group %d %v, want %d", c.name, c.qk, g, err, c.want)
		}
	}
	if _, err := groupOf("decoder.final_layernorm.weight", 1, false, 0, -1); !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), "no param group has wd_mult 0") {
		t.Errorf("a norm with no group for it: %v", err)
	}
}

// namespace is an argparse.Namespace as a pickle reads it, with Megatron's fields for a
// TP=2 × PP=2 Llama-style run and the changes given.
func namespace(changes ...any) *statedict.Object {
	d := group("tensor_model_parallel_size", int64(2), "pipeline_model_parallel_size", int64(2), "num_layers", int64(4),
		"hidden_size", int64(16), "ffn_hidden_size", int64(24), "num_attention_heads", int64(4), "group_query_attention", true,
		"num_query_groups", int64(2), "kv_channels", nil, "swiglu", true, "padded_vocab_size", int64(64), "vocab_size", int64(50),
		"use_distributed_optimizer", true, "world_size", int64(8), "ckpt_format", "torch")
	for i := 0; i < len(changes); i += 2 {
		d.Set(changes[i], changes[i+1])
	}
	return &statedict.Object{Class: "argparse.Namespace", Call: statedict.CallNew, State: d}
}

// TestParseArgs reads what the merge needs from a run's args and refuses the layouts it
// does not merge, naming the argument.
func TestParseArgs(t *testing.T) {
	a, err := parseArgs(namespace())
	if err != nil || a.tp != 2 || a.pp != 2 || a.groups != 2 || a.kv != 4 || !a.swiglu || !a.tied || a.vocab != 50 || a.dpcp != 2 {
		t.Fatalf("%+v %v", a, err)
	}
	if a, _ := parseArgs(namespace("group_query_attention", false)); a.groups != 4 {
		t.Errorf("without GQA, %d query groups, want one per head", a.groups)
	}
	for _, c := range []struct {
		changes []any
		kind    error
		says    string
	}{
		{[]any{"virtual_pipeline_model_parallel_size", int64(2)}, ckpterr.ErrUnsupported, "virtual pipeline stages"},
		{[]any{"expert_model_parallel_size", int64(4)}, ckpterr.ErrUnsupported, "expert parallelism"},
		{[]any{"num_experts", int64(8)}, ckpterr.ErrUnsupported, "a mixture of experts"},
		{[]any{"pipeline_model_parallel_layout", "Et|tL"}, ckpterr.ErrUnsupported, "pipeline_model_parallel_layout"},
		{[]any{"ckpt_format", "torch_dist"}, ckpterr.ErrCorrupt, `args.ckpt_format is "torch_dist"`},
		{[]any{"vocab_size", int64(65)}, ckpterr.ErrCorrupt, "vocab_size 65 exceeds args.padded_vocab_size 64"},
		{[]any{"hidden_size", "16"}, ckpterr.ErrCorrupt, `args.hidden_size is "16"`},
		{[]any{"tensor_model_parallel_size", int64(1 << 20)}, ckpterr.ErrCorrupt, "args.tensor_model_parallel_size is 1048576"},
		{[]any{"num_layers", nil}, ckpterr.ErrCorrupt, "args.num_layers is None"},
		{[]any{"swiglu", int64(1)}, ckpterr.ErrCorrupt, "args.swiglu is 1, not a bool"},
	} {
		_, err := parseArgs(namespace(c.changes...))
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %v saying %q", c.changes, err, c.kind, c.says)
		}
	}
	if _, err := parseArgs(statedict.NewDict("")); !errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("args not a Namespace: %v", err)
	}
	x, _ := parseArgs(namespace())
	y, _ := parseArgs(namespace("ffn_hidden_size", int64(32), "rank", int64(5)))
	if f, a, b := x.agree(y); f != "ffn_hidden_size" || a != int64(24) || b != int64(32) {
		t.Errorf("disagreement on %q (%v, %v), want ffn_hidden_size", f, a, b)
	}
	if f, _, _ := x.agree(x); f != "" {
		t.Errorf("args disagree with themselves on %s", f)
	}
}

// TestConcatEmpty: parts without elements (and without storage, as an empty tensor may
// be) merge into an empty tensor.
func TestConcatEmpty(t *testing.T) {
	e := &statedict.Tensor{DType: statedict.Float32, Shape: []int64{2, 0}, Strides: []int64{0, 1}}
	x, err := concat("w", 0, []part{{copyOf: copyOf{e, "r0"}, n: 2}, {copyOf: copyOf{e, "r1"}, n: 2}})
	if err != nil || !slices.Equal(x.Shape, []int64{4, 0}) {
		t.Fatalf("%v %v", x, err)
	}
	if b, err := x.Bytes(); err != nil || len(b) != 0 {
		t.Errorf("%d bytes, %v", len(b), err)
	}
}

// TestMergeQKVGroups: the fused query-key-value rows merge rank after rank only when every
// rank holds whole query groups — Megatron's attention divides num_query_groups by the
// tensor-parallel size (divide() asserts it), so fewer groups than ranks (one key-value head
// over two ranks) is no layout Megatron writes, and is refused naming the tensor even when
// the rows add up.
func TestMergeQKVGroups(t *testing.T) {
	for _, c := range []struct {
		groups int64
		says   string
	}{
		{4, ""},
		{2, ""},
		{1, "1 query groups do not divide over 2 tensor-parallel ranks"},
	} {
		a, err := parseArgs(namespace("num_query_groups", c.groups))
		if err != nil {
			t.Fatal(err)
		}
		perGroup := a.heads / a.groups
		rows := a.groups * (perGroup + 2) * a.kv / 2
		var stage []*rank
		for i := range 2 {
			x := floats([]int64{rows, a.hidden}, float32(i))
			stage = append(stage, &rank{folder: fmt.Sprintf("mp_rank_%02d_000", i), byName: map[string]*statedict.Tensor{"decoder.layers.0.self_attention.linear_qkv.weight": x}})
		}
		m := &merger{at: "it", args: a, grid: [][]*rank{stage, stage}}
		e := entry{name: "decoder.layers.0.self_attention.linear_qkv.weight", local: "decoder.layers.0.self_attention.linear_qkv.weight", split: qkv}
		x, err := m.merge(e, "", weightOf)
		if c.says == "" {
			if err != nil || !slices.Equal(x.Shape, []int64{2 * rows, a.hidden}) {
				t.Errorf("%d groups: %v %v", c.groups, x, err)
			}
			continue
		}
		if !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), e.name) {
			t.Errorf("%d groups: %v, want it to say %q", c.groups, err, c.says)
		}
	}
}

// TestMergeThroughLinks: rank files that are links inside the checkpoint folder (as a hub
// cache's snapshot links each file into blobs/) merge as the files themselves; a link
// leading outside it is refused, naming the file.
func TestMergeThroughLinks(t *testing.T) {
	want, _ := readExpected(t)
	at := filepath.Join(t.TempDir(), "llama_tp2pp2")
	if err := os.CopyFS(at, os.DirFS(fixtures+"llama_tp2pp2")); err != nil {
		t.Fatal(err)
	}
	it := filepath.Join(at, "iter_0000003")
	blobs := filepath.Join(at, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"} {
		for _, f := range []string{RankFile, DistribOptimFile} {
			p, blob := filepath.Join(it, r, f), filepath.Join(blobs, r+"-"+f)
			if err := os.Rename(p, blob); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join("..", "..", "blobs", r+"-"+f), p); err != nil {
				t.Fatal(err)
			}
		}
	}
	ck, err := Open(context.Background(), at, openers)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = statedict.Walk(ck.Root, "", func(name string, v statedict.Value) error {
		if w, ok := want["llama"].Tensors.Entries[name]; ok {
			if digest(t, v.(*statedict.Tensor)) != w.SHA256 {
				t.Errorf("%s differs from torch's TP=1 model", name)
			}
			n++
		}
		return nil
	})
	ck.Close()
	if err != nil || n != len(want["llama"].Tensors.Names) {
		t.Fatalf("%d of %d tensors, %v", n, len(want["llama"].Tensors.Names), err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.pt")
	p := filepath.Join(it, "mp_rank_01_001", DistribOptimFile)
	if err := os.Rename(filepath.Join(blobs, "mp_rank_01_001-"+DistribOptimFile), outside); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, p); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), at, openers); !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), "iter_0000003/mp_rank_01_001/distrib_optim.pt is a link leading outside") {
		t.Errorf("a distrib_optim.pt leading outside: %v", err)
	}
}
