package verify_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// model is a tiny random model testdata/forward/gen.py wrote.
type model struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Tokens []int  `json:"tokens"`
}

// forwardCases are the models the forward tests convert: float32 (GQA, untied), bfloat16
// tied, mixtures of experts (Qwen3-MoE, Mixtral's per-expert weights), Gemma 2's
// soft-capping, Phi-3's fused projections, StarCoder2's LayerNorm biases, FP8 block-quantized
// and MXFP4; and a model of every block variant the families compose — norms (LayerNorm with
// biases and a parallel residual, post-norm, LayerNorm1P, sandwich RMSNorms), attention
// (Conv1D, per-head fused QKV, ALiBi, grouped fused QKV, learned positions, MLA with
// in-place pairs, mixture of attention heads), MLPs (ungated GELU, ReLU², fused gate_up) and
// mixtures of experts (sigmoid with groups, softmax of the top-k logits, sparsemixer,
// input-weighted with a shared expert) — and the state-space block (Mamba, Falcon-Mamba).
var forwardCases = slices.Concat(calibration, []string{
	"gpt2", "gpt_neox", "bloom", "falcon_new_arch_bf16", "opt", "nemotron", "glm4", "deepseek_v2", "jetmoe", "glm4_moe", "granitemoe",
	"phimoe", "llama4_text", "mamba", "falcon_mamba"})

// calibration are the models the default thresholds were derived from
// (testdata/verify/README.md).
var calibration = []string{"llama_gqa", "qwen2_tied_bf16", "qwen3_moe", "mixtral", "deepseek_v3", "gemma2", "phi3", "starcoder2",
	"llama_fp8", "gpt_oss_mxfp4"}

var (
	modelsOnce sync.Once
	modelsHost string
	models     map[string]model
	modelsErr  error
)

// generated writes the forward cases once per test binary (removed by TestMain) and
// returns them by name and their folder as the host sees it.
func generated(t *testing.T) (map[string]model, string) {
	t.Helper()
	o := oracle.Require(t)
	modelsOnce.Do(func() {
		base := filepath.Join(oracle.RepoRoot(), ".oracle-tmp")
		if modelsErr = os.MkdirAll(base, 0o755); modelsErr != nil {
			return
		}
		if modelsHost, modelsErr = os.MkdirTemp(base, "verify-models-"); modelsErr != nil {
			return
		}
		var out []byte
		out, modelsErr = o.Python(append([]string{"testdata/forward/gen.py", inChroot(modelsHost)}, forwardCases...)...)
		var list []model
		if modelsErr == nil {
			modelsErr = json.Unmarshal(out, &list)
		}
		models = map[string]model{}
		for _, m := range list {
			models[m.Name] = m
		}
	})
	if modelsErr != nil {
		t.Fatal(modelsErr)
	}
	return models, modelsHost
}

// inChroot is where the oracle sees a path inside the repository.
func inChroot(host string) string {
	rel, _ := filepath.Rel(oracle.RepoRoot(), host)
	return "/repo/" + filepath.ToSlash(rel)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if modelsHost != "" {
		os.RemoveAll(modelsHost)
	}
	os.Exit(code)
}

// conversion is one way of converting a forward case.
type conversion struct {
	label  string
	format formats.Layout
	args   []string
	gen    string // --tpu-gen, and the generation the forward runs for
}

// conversionsOf lists the correct conversions of a case; the first is the one broken.
func conversionsOf(name string) []conversion {
	switch name {
	case "llama_fp8":
		return []conversion{
			{"dequantized", formats.SafetensorsFile, []string{"--dequantize"}, ""},
			{"fp8 kept for tpu7x", formats.SafetensorsFile, []string{"--dequantize=auto"}, "tpu7x"},
			{"dequantized for v6e, dcp", formats.DCPFolder, []string{"--dequantize=auto"}, "v6e"},
		}
	case "gpt_oss_mxfp4":
		return []conversion{
			{"dequantized for v6e", formats.SafetensorsFile, []string{"--dequantize=auto"}, "v6e"},
			{"mxfp4 kept", formats.SafetensorsFile, nil, ""},
		}
	case "qwen2_tied_bf16":
		return []conversion{
			{"plain", formats.SafetensorsFile, nil, ""},
			{"float32", formats.SafetensorsFile, []string{"--dtype", "float32"}, ""},
			{"torch file", formats.TorchFile, nil, ""},
		}
	}
	return []conversion{
		{"bfloat16", formats.SafetensorsFile, []string{"--dtype", "bfloat16"}, ""},
		{"plain", formats.SafetensorsFile, nil, ""},
		{"dcp", formats.DCPFolder, nil, ""},
		{"renamed", formats.SafetensorsFile, []string{"--rename", `^(model|transformer|gpt_neox|backbone|lm_head|embed_out)\.=wrapped.$1.`}, ""},
	}
}

// convertCase converts a forward case as the CLI would with c's flags.
func convertCase(t *testing.T, src, dst string, c conversion) {
	t.Helper()
	convertTo(t, src, dst, c.format, c.args, func(o *convert.Options) {
		for i := 0; i < len(c.args); i++ {
			switch a := c.args[i]; {
			case a == "--dtype":
				o.Plan.DType, _ = statedict.ParseDType(c.args[i+1])
			case a == "--dequantize":
				o.Plan.Dequantize = quant.DequantizeAll
			case a == "--dequantize=auto":
				o.Plan.Dequantize = quant.DequantizeAuto
				o.Target.Generation = mustGen(t, c.gen)
			case a == "--rename":
				o.Plan.Renames = append(o.Plan.Renames, mustRename(t, c.args[i+1]))
			}
		}
	})
	if c.gen != "" {
		// The manifest records --tpu-gen as the CLI does.
		m := readManifest(t, dst)
		m.Args = append(m.Args[:len(m.Args)-2:len(m.Args)-2], "--tpu-gen", c.gen, src, dst)
		writeManifest(t, dst, m)
	}
}

// sharded are the cases whose first conversion is also laid over two torch ranks
// (testdata/verify/shard.py): a per-device DCP output, read through formats/dcp's reassembly.
// Phi-3's fused qkv_proj and gate_up_proj, GPT-NeoX's per-head query_key_value and
// Granite-MoE's stacked input_linear are split by rows or columns there, so the forward's
// fused products run from pieces that straddle q, k and v or gate and up; GPT-2's Conv1D
// weights are split along their stored [in, out] dimensions, so transposed pieces.
var sharded = []string{"llama_gqa", "qwen3_moe", "mixtral", "deepseek_v3", "phi3", "starcoder2", "gpt2", "gpt_neox", "granitemoe"}

// structural are the broken variants that change what the model computes beyond what
// rounding could: the forward check must reject them. The other variants — one element's
// sign, 1% noise, truncation instead of rounding — are measured but left to tensor parity.
var structural = []string{"one_element_x16", "transposed", "layers_swapped", "embed_shifted", "norm_dropped"}

// TestForwardThresholds is the acceptance test of `ckpt verify` and `ckpt verify --forward`
// on real models and the measurement the default thresholds come from. Every correct
// conversion of every forward case — plain, cast, renamed, FP8 and MXFP4 dequantized or
// kept, DCP, and per-device sharded by two torch ranks — must pass tensor parity and the
// forward comparison; every deliberately broken one (testdata/verify/break.py) must fail
// parity naming its tensor, and the structural ones the forward comparison too. The
// measures are logged as a table (with CKPT_VERIFY_MEASURE=FILE also written there as JSON),
// and each default threshold must lie between the worst correct conversion and the mildest
// structural bug: it is their geometric mean, rounded (testdata/verify/README.md).
func TestForwardThresholds(t *testing.T) {
	o := oracle.Require(t)
	ms, dir := generated(t)
	host, _ := oracle.TempDir(t)
	type row struct {
		Case, Variant string
		Correct       bool
		Report        *verify.LogitsReport
	}
	var rows []row
	check := func(name, label, src, dst string, correct bool, opts verify.ForwardOptions) {
		t.Helper()
		popts := verify.ParityOptions{}
		if !correct {
			popts.Manifest = "-"
		}
		par, err := verify.Parity(t.Context(), src, dst, popts)
		if err != nil {
			t.Fatalf("%s %s: parity: %v", name, label, err)
		}
		if par.OK() != correct {
			t.Errorf("%s %s: parity OK %v: %+v", name, label, par.OK(), par.Problems)
		}
		// The generator's 12 tokens and the 32 default ones, judged together.
		var tokens []int
		var ref, refTPU, got []float32
		vocab := 0
		for _, ids := range [][]int{opts.Tokens, nil} {
			o := opts
			o.Tokens = ids
			fr, lg, err := verify.Forward(t.Context(), src, dst, o)
			if err != nil {
				t.Fatalf("%s %s: %v", name, label, err)
			}
			// torch's two ranks' DCP output runs from their pieces; every other from whole tensors.
			if perDevice := strings.HasPrefix(label, "per-device"); perDevice != (fr.Shards != nil) || perDevice && fr.Shards.Ranks != 2 {
				t.Errorf("%s %s: forward ran from shards %+v", name, label, fr.Shards)
			}
			T, V := len(lg.Tokens), lg.Vocab
			r, rt, g := make([]float32, T*V), make([]float32, T*V), make([]float32, T*V)
			err = lg.Rows(r, rt, g, 0, T)
			lg.Close()
			if err != nil {
				t.Fatal(err)
			}
			tokens, ref, refTPU, got, vocab = append(tokens, lg.Tokens...), append(ref, r...), append(refTPU, rt...), append(got, g...), V
		}
		rep, err := verify.CompareLogits(tokens, vocab, ref, refTPU, got, verify.DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{name, label, correct, rep})
		switch {
		case correct && !rep.OK():
			t.Errorf("%s, correct conversion %q: %s", name, label, rep)
		case !correct && rep.OK() && slices.Contains(structural, label):
			t.Errorf("%s, broken %q passes: %s", name, label, rep)
		}
	}
	firsts := map[string]string{}
	var shardArgs []string
	for _, name := range forwardCases {
		m := ms[name]
		src := filepath.Join(dir, m.Path)
		if err := os.MkdirAll(filepath.Join(host, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, c := range conversionsOf(name) {
			dst := filepath.Join(host, name, fmt.Sprintf("conv%d", i))
			if c.format == formats.SafetensorsFile {
				dst += ".hf"
			}
			convertCase(t, src, dst, c)
			if i == 0 {
				firsts[name] = dst
			}
			opts := verify.ForwardOptions{Tokens: m.Tokens}
			if c.gen != "" {
				opts.Generation = mustGen(t, c.gen)
			}
			check(name, c.label, src, dst, true, opts)
		}
		if slices.Contains(sharded, name) {
			shardArgs = append(shardArgs, inChroot(firsts[name]), inChroot(filepath.Join(host, name, "sharded")))
		}
	}
	if _, err := o.Python(append([]string{"testdata/verify/shard.py"}, shardArgs...)...); err != nil {
		t.Fatal(err)
	}
	for _, name := range sharded {
		m := ms[name]
		// The sharded copy of the first (bfloat16) conversion has no manifest: parity infers
		// the cast.
		check(name, "per-device sharded (2 ranks)", filepath.Join(dir, m.Path), filepath.Join(host, name, "sharded"), true, verify.ForwardOptions{Tokens: m.Tokens})
	}
	args := []string{"testdata/verify/break.py"}
	for _, name := range forwardCases {
		job := inChroot(firsts[name]) + "," + inChroot(filepath.Join(host, name, "broken"))
		if name == "llama_gqa" || name == "qwen3_moe" || name == "gemma2" {
			job += "," + inChroot(filepath.Join(dir, ms[name].Path)) // a float32 source: truncation measured too
		}
		args = append(args, job)
	}
	out, err := o.Python(args...)
	if err != nil {
		t.Fatal(err)
	}
	var written map[string][]string
	if err := json.Unmarshal(out, &written); err != nil {
		t.Fatal(err)
	}
	for _, name := range forwardCases {
		m := ms[name]
		broken := filepath.Join(host, name, "broken")
		for _, v := range written[inChroot(broken)] {
			check(name, v, filepath.Join(dir, m.Path), filepath.Join(broken, v), false, verify.ForwardOptions{Tokens: m.Tokens})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-16s %-28s %-7s %9s %10s %9s %11s %6s %6s %9s %6s %6s %9s\n", "case", "variant", "correct", "max abs", "abs/spread", "mean abs", "1-cosine", "top-1", "exact", "max KL", "agree", "by tpu", "drift KL")
	for _, r := range rows {
		l := r.Report
		fmt.Fprintf(&b, "%-16s %-28s %-7v %9.3g %10.3g %9.3g %11.3g %6.3f %6.3f %9.3g %6.3f %6d %9.3g\n", r.Case, r.Variant, r.Correct, l.MaxAbs, l.MaxAbsRel, l.MeanAbs, 1-l.MinCosine, l.Top1, l.Top1Exact, l.MaxKL, l.Agree, l.ByTPU, l.Drift)
	}
	// On the calibration models, each per-position threshold against the worst position of
	// any correct conversion (all must agree) and the mildest structural bug at the MinAgree
	// quantile of its positions (it fails once more than 1 − MinAgree of them are outside).
	// A position is measured against the nearer reference (by KL): the source in float32 or
	// the source on a TPU — a choice that does not depend on the thresholds being derived.
	// The other models (one of each block variant) are held to the verdicts above only.
	def := verify.DefaultThresholds()
	effective := func(p verify.Position, of func(verify.Distance) float64) float64 {
		if p.SourceTPU != nil && p.SourceTPU.KL < p.KL {
			return of(*p.SourceTPU)
		}
		return of(p.Distance)
	}
	measure := func(r row, of func(verify.Distance) float64) float64 {
		v := make([]float64, len(r.Report.Positions))
		for i, p := range r.Report.Positions {
			v[i] = effective(p, of)
		}
		slices.Sort(v)
		if r.Correct {
			return v[len(v)-1]
		}
		return v[int(math.Ceil(def.MinAgree*float64(len(v))))-1]
	}
	measures := []struct {
		name      string
		of        func(verify.Distance) float64
		threshold float64
	}{
		{"KL", func(d verify.Distance) float64 { return d.KL }, def.MaxKL},
		{"1-cosine", func(d verify.Distance) float64 { return 1 - d.Cosine }, 1 - def.MinCosine},
		{"abs/spread", func(d verify.Distance) float64 { return d.MaxAbsRel }, def.MaxAbsRel},
	}
	for _, me := range measures {
		worstOK, mildBad := 0.0, math.Inf(1)
		for _, r := range rows {
			if !slices.Contains(calibration, r.Case) {
				continue
			}
			switch v := measure(r, me.of); {
			case r.Correct:
				worstOK = max(worstOK, v)
			case slices.Contains(structural, r.Variant):
				mildBad = min(mildBad, v)
			}
		}
		fmt.Fprintf(&b, "%s: worst correct position %.3g, mildest structural bug (at the %g quantile) %.3g, geometric mean %.3g, default %.3g\n",
			me.name, worstOK, def.MinAgree, mildBad, math.Sqrt(worstOK*mildBad), me.threshold)
		if !(worstOK < me.threshold && me.threshold < mildBad) {
			t.Errorf("%s: default %.3g is not between the worst correct conversion (%.3g) and the mildest structural bug (%.3g)", me.name, me.threshold, worstOK, mildBad)
		}
	}
	minOK, maxBad := 1.0, 0.0
	for _, r := range rows {
		if !slices.Contains(calibration, r.Case) {
			continue
		}
		switch {
		case r.Correct:
			minOK = min(minOK, r.Report.Agree)
		case slices.Contains(structural, r.Variant):
			maxBad = max(maxBad, r.Report.Agree)
		}
	}
	fmt.Fprintf(&b, "positions agreeing: correct conversions at least %.3g, structural bugs at most %.3g, default %g\n", minOK, maxBad, def.MinAgree)
	if !(maxBad < def.MinAgree && def.MinAgree <= minOK) {
		t.Errorf("MinAgree %g is not between the structural bugs (%.3g) and the correct conversions (%.3g)", def.MinAgree, maxBad, minOK)
	}
	t.Log(b.String())
	if p := os.Getenv("CKPT_VERIFY_MEASURE"); p != "" {
		j, _ := json.MarshalIndent(rows, "", " ")
		os.WriteFile(p, j, 0o644)
	}
}
