package forward

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
)

// Case is one tiny model written by testdata/forward/gen.py.
type Case struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Tokens []int  `json:"tokens"`
	// LongTokens are a few dozen ids whose float32 logits are NAME.long.safetensors.
	LongTokens []int  `json:"long_tokens"`
	ModelType  string `json:"model_type"`
	// Architecture is the causal-LM class transformers built.
	Architecture string `json:"architecture"`
	// Generic marks an architecture the Go pass does not run (for verify --emit-torch).
	Generic bool `json:"generic"`
}

var (
	casesOnce sync.Once
	casesDir  string
	cases     []Case
	casesErr  error
)

// generated runs the generator once per test binary and returns its cases and folder, which
// TestMain removes when the tests are done.
func generated(t *testing.T) ([]Case, string) {
	t.Helper()
	o := oracle.Require(t)
	casesOnce.Do(func() {
		base := filepath.Join(oracle.RepoRoot(), ".oracle-tmp")
		if casesErr = os.MkdirAll(base, 0o755); casesErr != nil {
			return
		}
		if casesDir, casesErr = os.MkdirTemp(base, "forward-cases-"); casesErr != nil {
			return
		}
		// CKPT_FORWARD_CASES (comma-separated case names) generates only those, for
		// iterating on one family; tests needing a case left out fail.
		args := []string{"testdata/forward/gen.py", "/repo/.oracle-tmp/" + filepath.Base(casesDir)}
		if only := os.Getenv("CKPT_FORWARD_CASES"); only != "" {
			args = append(args, strings.Split(only, ",")...)
		}
		var out []byte
		out, casesErr = o.Python(args...)
		if casesErr == nil {
			casesErr = json.Unmarshal(out, &cases)
		}
	})
	if casesErr != nil {
		t.Fatal(casesErr)
	}
	return cases, casesDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if casesDir != "" {
		os.RemoveAll(casesDir)
	}
	os.Exit(code)
}

// readLogits reads the "logits" tensor [1, T, vocab] the generator wrote.
func readLogits(t *testing.T, path string) ([]float32, []int64) {
	t.Helper()
	ck, err := formats.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range ts {
		if nt.Name != "logits" {
			continue
		}
		if nt.Tensor.DType != statedict.Float32 {
			t.Fatalf("%s: logits are %s", path, nt.Tensor.DType)
		}
		m, err := matrixOf(view{name: "logits", t: nt.Tensor, base: nt.Tensor.Offset, rs: nt.Tensor.NumEl(), cs: 1, rows: 1, cols: int(nt.Tensor.NumEl())}, false)
		if err != nil {
			t.Fatal(err)
		}
		v, err := m.rowsF32(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return v, nt.Tensor.Shape
	}
	t.Fatalf("%s: no logits tensor", path)
	return nil, nil
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}

// TestMatchesTransformers runs every generated model in float32 on its 12 and its 40 tokens
// and compares the logits with transformers' float32 eager forward: at most 1e-4 apart. It
// runs once per matmul kernel this machine has (AVX-512, AVX2, the portable fallback).
func TestMatchesTransformers(t *testing.T) {
	cs, dir := generated(t)
	def := kernel.Current()
	defer kernel.Use(def)
	for _, impl := range kernel.Available() {
		if err := kernel.Use(impl); err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			t.Run(impl+"/"+c.Name, func(t *testing.T) { checkCase(t, dir, c) })
		}
	}
}

func checkCase(t *testing.T, dir string, c Case) {
	if c.Generic {
		if _, err := Open(context.Background(), filepath.Join(dir, c.Path), Options{}); !IsUnsupported(err) {
			t.Fatalf("the generic case %s (%s) opens: %v", c.Name, c.ModelType, err)
		}
		return
	}
	d := caseError(t, dir, c)
	t.Logf("%s (%s): max abs error %.3g", c.Name, c.ModelType, d)
	if d > 1e-4 {
		t.Errorf("max abs error %g > 1e-4", d)
	}
}

// caseError runs a generated model in float32 on its tokens and on its long tokens and
// returns the largest absolute difference of its logits from transformers'.
func caseError(t *testing.T, dir string, c Case) float64 {
	t.Helper()
	if len(c.LongTokens) == 0 {
		t.Fatalf("%s: the generator wrote no long tokens", c.Name)
	}
	m, err := Open(context.Background(), filepath.Join(dir, c.Path), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var d float64
	for _, run := range []struct {
		file   string
		tokens []int
	}{{".logits.safetensors", c.Tokens}, {".long.safetensors", c.LongTokens}} {
		want, shape := readLogits(t, filepath.Join(dir, c.Name+run.file))
		got, err := m.Forward(context.Background(), run.tokens)
		if err != nil {
			t.Fatal(err)
		}
		if len(shape) != 3 || shape[1] != int64(len(run.tokens)) || int(shape[2]) != m.Config().Vocab || len(got) != len(want) {
			t.Fatalf("%s: logits shape %v, got %d values for %d tokens × vocab %d", run.file, shape, len(got), len(run.tokens), m.Config().Vocab)
		}
		d = max(d, maxAbsDiff(got, want))
	}
	return d
}

// TestMXFP4MatchesQuant checks the forward pass's MXFP4 row decoder bit for bit against
// package quant's dequantization (itself bit-exact with transformers), on every expert of
// the generated gpt-oss MXFP4 checkpoint.
func TestMXFP4MatchesQuant(t *testing.T) {
	_, dir := generated(t)
	ck, err := formats.Open(context.Background(), filepath.Join(dir, "gpt_oss_mxfp4"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	_, plan, err := quant.DetectCheckpoint(ck)
	if err != nil || plan == nil {
		t.Fatalf("plan %v, err %v", plan, err)
	}
	tensors := map[string]*statedict.Tensor{}
	list, _ := ck.Tensors()
	for _, nt := range list {
		tensors[nt.Name] = nt.Tensor
	}
	checked := 0
	for _, g := range plan.Groups {
		E, in, out := int(g.Shape[0]), int(g.Shape[1]), int(g.Shape[2])
		deq, err := g.Dequantize(statedict.BFloat16)
		if err != nil {
			t.Fatal(err)
		}
		all := make([]byte, deq.NBytes())
		if _, err := deq.Storage.ReadAt(all, 0); err != nil {
			t.Fatal(err)
		}
		for e := range E {
			m, err := mxfp4Expert(g.Name, g, tensors, e, E, out, in)
			if err != nil {
				t.Fatal(err)
			}
			rows := make([]byte, out*in*2)
			if err := m.fill(rows, 0, out); err != nil {
				t.Fatal(err)
			}
			for o := range out {
				for i := range in {
					got := binary.NativeEndian.Uint16(rows[(o*in+i)*2:])
					want := binary.LittleEndian.Uint16(all[((e*in+i)*out+o)*2:])
					if got != want {
						t.Fatalf("%s expert %d [out %d, in %d]: %#04x, quant %#04x", g.Name, e, o, i, got, want)
					}
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no MXFP4 values checked")
	}
}

// TestTPUPrecisionMatchesEmulation compares --precision tpu with transformers run with every
// matrix product's inputs rounded to bfloat16 (gen.py's tpu_matmuls). Rounding to bfloat16
// amplifies the last-bit differences of float32 summation orders, so the two cannot agree
// bit for bit; what must hold is that both depart from the float32 logits by the same
// amount (a forward pass that rounded nothing, or rounded more than the matrix inputs, would
// not), and that they stay close to each other.
func TestTPUPrecisionMatchesEmulation(t *testing.T) {
	cs, dir := generated(t)
	for _, c := range cs {
		if c.Generic {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f32, _ := readLogits(t, filepath.Join(dir, c.Name+".logits.safetensors"))
			emu, _ := readLogits(t, filepath.Join(dir, c.Name+".tpu.safetensors"))
			m, err := Open(context.Background(), filepath.Join(dir, c.Path), Options{Precision: TPU})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got, err := m.Forward(context.Background(), c.Tokens)
			if err != nil {
				t.Fatal(err)
			}
			mean := func(a, b []float32) float64 {
				var s float64
				for i := range a {
					s += math.Abs(float64(a[i]) - float64(b[i]))
				}
				return s / float64(len(a))
			}
			var scale float64
			for _, v := range emu {
				scale = max(scale, math.Abs(float64(v)))
			}
			ours, theirs, between := mean(got, f32), mean(emu, f32), mean(got, emu)
			t.Logf("%s: mean |tpu−f32| %.3g (emulation %.3g), mean |tpu−emulation| %.3g, max |tpu−emulation| %.3g of max |logit| %.3g",
				c.Name, ours, theirs, between, maxAbsDiff(got, emu), scale)
			if ratio := ours / theirs; !(ratio > 0.5 && ratio < 2) {
				t.Errorf("departure from float32 %.3g is %.2f× the emulation's %.3g", ours, ratio, theirs)
			}
			if d := maxAbsDiff(got, emu); d > 0.05*scale {
				t.Errorf("max |tpu−emulation| %.3g exceeds 5%% of the largest logit %.3g", d, scale)
			}
		})
	}
}

// TestKeepFP8 runs the FP8 checkpoint in TPU precision with and without KeepFP8: keeping the
// weights as code×scale (unrounded) must change the logits and bring them closer to the
// float32 reference than dequantizing the weights to bfloat16 does.
func TestKeepFP8(t *testing.T) {
	cs, dir := generated(t)
	var c *Case
	for i := range cs {
		if cs[i].Name == "llama_fp8" {
			c = &cs[i]
		}
	}
	if c == nil {
		t.Fatal("gen.py wrote no llama_fp8 case")
	}
	ref, _ := readLogits(t, filepath.Join(dir, c.Name+".logits.safetensors"))
	run := func(keep bool) []float32 {
		m, err := Open(context.Background(), filepath.Join(dir, c.Path), Options{Precision: TPU, KeepFP8: keep})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out, err := m.Forward(context.Background(), c.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mean := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			s += math.Abs(float64(a[i]) - float64(b[i]))
		}
		return s / float64(len(a))
	}
	bf16, kept := run(false), run(true)
	t.Logf("mean |logit − float32|: FP8 dequantized to bfloat16 %.3g, kept as FP8 %.3g", mean(bf16, ref), mean(kept, ref))
	if maxAbsDiff(bf16, kept) == 0 {
		t.Fatal("KeepFP8 changed nothing")
	}
	if mean(kept, ref) >= mean(bf16, ref) {
		t.Errorf("keeping FP8 weights exact did not bring the logits closer to float32")
	}
}

// TestDefaultsTable regenerates defaults.json — the config-class defaults every supported
// model_type is read with — from transformers and fails when the embedded table differs.
func TestDefaultsTable(t *testing.T) {
	o := oracle.Require(t)
	out, err := o.Python(append([]string{"testdata/forward/defaults.py"}, Supported()...)...)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(defaultsJSON) {
		t.Errorf("verify/forward/defaults.json is not what testdata/forward/defaults.py writes for the supported model types; regenerate it:\n"+
			"  scripts/oracle python testdata/forward/defaults.py %s > verify/forward/defaults.json", strings.Join(Supported(), " "))
	}
}

// familyTableMarks delimit the generated table in docs/verify.md.
const (
	familyTableBegin = "<!-- forward families: generated by TestFamilyTable (CKPT_UPDATE_DOCS=1 go test ./verify/forward -run TestFamilyTable) -->"
	familyTableEnd   = "<!-- end of forward families -->"
)

// TestFamilyTable is the table of docs/verify.md listing every family the forward pass runs,
// the transformers class, the generated test models and the largest logit error against
// transformers' float32 forward over them. With CKPT_UPDATE_DOCS=1 it rewrites the table;
// otherwise it fails when the table's families or models differ from what is supported and
// generated, or a listed error is not what this machine measures to within a factor of 10
// (the summation order of the kernels differs from machine to machine).
func TestFamilyTable(t *testing.T) {
	cs, dir := generated(t)
	type fam struct {
		arch   string
		models []string
		err    float64
	}
	fams := map[string]*fam{}
	for _, c := range cs {
		if c.Generic {
			continue
		}
		f := fams[c.ModelType]
		if f == nil {
			f = &fam{arch: c.Architecture}
			fams[c.ModelType] = f
		}
		f.models = append(f.models, c.Name)
		f.err = max(f.err, caseError(t, dir, c))
	}
	if os.Getenv("CKPT_FORWARD_CASES") != "" {
		t.Skip("CKPT_FORWARD_CASES limits the generated models")
	}
	var missing []string
	for _, mt := range Supported() {
		if fams[mt] == nil {
			missing = append(missing, mt)
		}
	}
	if len(missing) > 0 {
		t.Errorf("supported model types without a generated test model: %v", missing)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n| model_type | transformers class | test models | max abs error |\n|---|---|---|---|\n", familyTableBegin)
	var worst float64
	models := 0
	for _, mt := range slices.Sorted(maps.Keys(fams)) {
		f := fams[mt]
		worst = max(worst, f.err)
		models += len(f.models)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %.1e |\n", mt, f.arch, strings.Join(f.models, ", "), f.err)
	}
	fmt.Fprintf(&b, "\n%d model types, %d models; the largest error %.1e (%s kernels).\n%s",
		len(fams), models, worst, kernel.Current(), familyTableEnd)
	doc := filepath.Join(oracle.RepoRoot(), "docs", "verify.md")
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i, j := strings.Index(text, familyTableBegin), strings.Index(text, familyTableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated family table (%q … %q)", doc, familyTableBegin, familyTableEnd)
	}
	if os.Getenv("CKPT_UPDATE_DOCS") != "" {
		if err := os.WriteFile(doc, []byte(text[:i]+b.String()+text[j+len(familyTableEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old := strings.Split(strings.TrimSuffix(text[i:j], "\n"), "\n")
	cur := strings.Split(strings.TrimSuffix(strings.TrimSuffix(b.String(), familyTableEnd), "\n"), "\n")
	if len(old) != len(cur) {
		t.Fatalf("docs/verify.md's family table has %d lines, the families %d: regenerate it (CKPT_UPDATE_DOCS=1)", len(old), len(cur))
	}
	for k := range old {
		o, c := strings.Split(old[k], " | "), strings.Split(cur[k], " | ")
		if len(o) != 4 || len(c) != 4 || !strings.HasPrefix(o[0], "| `") {
			continue
		}
		if o[0] != c[0] || o[1] != c[1] || o[2] != c[2] {
			t.Errorf("docs/verify.md lists %q, the test models give %q: regenerate it (CKPT_UPDATE_DOCS=1)", old[k], cur[k])
			continue
		}
		var de, ce float64
		fmt.Sscanf(strings.TrimSuffix(o[3], " |"), "%g", &de)
		fmt.Sscanf(strings.TrimSuffix(c[3], " |"), "%g", &ce)
		if ce > 10*de && ce > 1e-7 || ce < de/10 && de > 1e-7 {
			t.Errorf("%s: docs/verify.md says %.1e, measured %.1e: regenerate it (CKPT_UPDATE_DOCS=1)", o[0], de, ce)
		}
	}
}

// TestSSMBlocks runs the state-space models on 40 positions a few at a time (2 and 7, so
// the convolution's history crosses blocks shorter than its taps) and all at once: the
// carried convolution inputs and state make them agree.
func TestSSMBlocks(t *testing.T) {
	cs, dir := generated(t)
	ran := 0
	for _, c := range cs {
		if c.ModelType != "mamba" && c.ModelType != "falcon_mamba" {
			continue
		}
		ran++
		run := func(rows int) []float32 {
			saved := ssmRows
			defer func() { ssmRows = saved }()
			if rows > 0 {
				ssmRows = func(int) int { return rows }
			}
			m, err := Open(context.Background(), filepath.Join(dir, c.Path), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			out, err := m.Forward(context.Background(), tokensOf(40, m.cfg.Vocab))
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		whole := run(0)
		for _, rows := range []int{2, 7} {
			if d := maxAbsDiff(whole, run(rows)); d > 1e-5 {
				t.Errorf("%s: %d positions at a time depart by %.3g", c.Name, rows, d)
			}
		}
	}
	if ran == 0 {
		t.Fatal("no state-space case generated")
	}
}
