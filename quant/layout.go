package quant

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Scheme names how one group of stored tensors (codes plus scales) encodes a
// logical tensor: the element format and which values share a scale.
type Scheme string

// The schemes ckpt dequantizes.
const (
	// SchemeFP8Tensor: FP8 codes with one scale per tensor (per expert for 3-D
	// weights).
	SchemeFP8Tensor Scheme = "fp8-tensor"
	// SchemeFP8Channel: FP8 codes with one scale per output row.
	SchemeFP8Channel Scheme = "fp8-channel"
	// SchemeFP8Column: FP8 codes with one scale per input column (fbgemm's fused
	// experts, quantized along their last dimension).
	SchemeFP8Column Scheme = "fp8-column"
	// SchemeFP8Block: FP8 codes with one scale per Block[0]×Block[1] tile of the
	// last two dimensions; edge tiles may be partial (DeepSeek-V3, compressed-tensors
	// block and group strategies, ModelOpt FP8_PB_WO).
	SchemeFP8Block Scheme = "fp8-block"
	// SchemeMXFP4: OCP MXFP4 as gpt-oss ships it: FP4 E2M1 codes, two per byte,
	// with one E8M0 exponent per 32 values.
	SchemeMXFP4 Scheme = "mxfp4"
	// SchemeNVFP4: FP4 E2M1 codes, two per byte, with one float8_e4m3fn scale per
	// 16 values and one float32 global scale.
	SchemeNVFP4 Scheme = "nvfp4"
)

// recipe is the exact evaluation order of one reference dequantizer (quant.md §4).
type recipe uint8

const (
	// recipeF32: y = f32(v·s), then the output cast. DeepSeek's weight_dequant and
	// transformers' Fp8Dequantize (R1, R3), fbgemm (R7), compressed-tensors with
	// float32 scales (R5).
	recipeF32 recipe = iota
	// recipeInScale: y = S(S(v)·s) in the scale's own dtype S (bfloat16 or
	// float16), then the output cast: compressed-tensors decompress (R5).
	recipeInScale
	// recipeInTarget: y = T(T(v)·T(s)) in the output dtype T: ModelOpt's
	// from_quantized_weight casts the scale to the target dtype first (R6).
	recipeInTarget
	// recipeMXFP4: y = T(ldexp(T(v), e−127)), exact: transformers'
	// convert_moe_packed_tensors (R8), output transposed to [E, in, out].
	recipeMXFP4
	// recipeNVFP4ModelOpt: p = f32(f32(s)·ws2), y = T(f32(v·p)) with nibble 8 as
	// +0: ModelOpt NVFP4QTensor.dequantize (R12).
	recipeNVFP4ModelOpt
	// recipeNVFP4CT: q = f32(bf16(s)/g) for a [1]-shaped float32 global scale g,
	// y = T(f32(v·q)) with nibble 8 as −0: compressed-tensors (R14).
	recipeNVFP4CT
	// recipeNVFP4CTScalar: as recipeNVFP4CT with a 0-dim global scale, which
	// leaves the arithmetic in bfloat16: q = bf16(bf16(s)/g), y = T(bf16(v·q)) (P7).
	recipeNVFP4CTScalar
)

// Group is one quantized logical tensor: the stored codes and the scales that
// dequantize them, named and shaped as transformers holds the tensor after
// loading it with dequantization.
type Group struct {
	// Name is the logical tensor's name after loading: the weight's own name for
	// FP8 and ModelOpt NVFP4, "….weight" for compressed-tensors' "….weight_packed",
	// "…gate_up_proj" for gpt-oss's "…gate_up_proj_blocks".
	Name string
	// Method is the configuration's quant_method (MethodFP8, …).
	Method string
	// Scheme is the layout.
	Scheme Scheme
	// Shape is the logical shape (gpt-oss experts: [E, in, out], transposed as
	// transformers does).
	Shape []int64
	// Block is how many values along the last two stored dimensions share one
	// scale, [rows, cols].
	Block []int64
	// Weight is the stored name of the codes; Scales the stored names of the scale
	// tensors the recipe uses.
	Weight string
	Scales []string

	recipe recipe
	format codec.Format // FP8 element format of the codes
	weight *statedict.Tensor
	scales []*statedict.Tensor
}

// Members lists the stored tensors of the group: the codes, then the scales.
func (g *Group) Members() []string {
	return append([]string{g.Weight}, g.Scales...)
}

// CodeDType is the dtype of the stored codes (float8_e4m3fn, uint8, …).
func (g *Group) CodeDType() statedict.DType { return g.weight.DType }

// Plan is what [Detect] finds in a checkpoint: its configuration, the quantized
// groups in checkpoint order, and the runtime-only tensors.
type Plan struct {
	Config *Config
	Groups []*Group
	// Aux lists stored tensors that only quantized kernels use (activation and
	// kv-cache scales: input_scale, k_scale, v_scale, …). They travel with the
	// quantized tensors and are dropped when a checkpoint is dequantized.
	Aux []string
}

// auxSuffixes end the names of runtime-only scales.
var auxSuffixes = []string{
	".input_scale", ".input_global_scale", ".input_zero_point", ".k_scale", ".v_scale", ".q_scale",
	".activation_scale", "_activation_scale",
}

// scaleSuffixes end the names of tensors that only make sense next to quantized
// codes; one nothing consumes means the configuration and the tensors disagree.
var scaleSuffixes = []string{
	".weight_scale_inv", "_scale_inv", "_scales_inv", ".weight_scale", ".weight_scale_2",
	".weight_global_scale", ".weight_packed", ".weight_zero_point", "_blocks",
}

func isFP8(d statedict.DType) bool {
	switch d {
	case statedict.Float8E4M3FN, statedict.Float8E5M2, statedict.Float8E4M3FNUZ, statedict.Float8E5M2FNUZ:
		return true
	}
	return false
}

// fp8Format maps an FP8 dtype to its codec.Format (isFP8 must hold).
func fp8Format(d statedict.DType) codec.Format {
	return map[statedict.DType]codec.Format{statedict.Float8E4M3FN: codec.E4M3FN, statedict.Float8E5M2: codec.E5M2,
		statedict.Float8E4M3FNUZ: codec.E4M3FNUZ, statedict.Float8E5M2FNUZ: codec.E5M2FNUZ}[d]
}

// isPacked reports whether d holds FP4 codes two per byte: uint8 as producers write
// them, or torch's float4_e2m1fn_x2 (safetensors F4).
func isPacked(d statedict.DType) bool { return d == statedict.Uint8 || d == statedict.Float4E2M1FNx2 }

func isFloatScale(d statedict.DType) bool {
	return d == statedict.Float32 || d == statedict.BFloat16 || d == statedict.Float16
}

// isE8M0 reports whether d holds E8M0 exponents: torch's float8_e8m0fnu or raw uint8.
func isE8M0(d statedict.DType) bool { return d == statedict.Float8E8M0FNU || d == statedict.Uint8 }

// detector carries the state of one Detect call.
type detector struct {
	cfg    *Config
	names  []string
	byName map[string]*statedict.Tensor
	used   map[string]bool
	plan   *Plan
}

// DetectCheckpoint reads ck's quantization config (LoadConfig) and finds its quantized
// groups among its tensors (Detect). plan is nil for a checkpoint that is not quantized;
// cfg is returned once read even when detection fails, so a caller can name the method.
// Its errors name ck.Path, once.
func DetectCheckpoint(ck *statedict.Checkpoint) (cfg *Config, plan *Plan, err error) {
	if cfg, err = LoadConfig(ck); err != nil {
		return cfg, nil, err // LoadConfig's errors name ck.Path
	}
	tensors, err := ck.Tensors()
	if err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	if plan, err = Detect(cfg, tensors); err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	return cfg, plan, nil
}

// Detect finds the quantized groups of a checkpoint from its configuration (nil
// when it has none) and its tensors' names, dtypes and shapes. A checkpoint
// without configuration gives a nil plan, unless it looks quantized (FP8 or packed
// codes next to scale tensors): that is an error, because its raw codes must
// never pass for weights. A configuration that disagrees with the tensors — a
// scale without codes, codes without scales, a layer the configuration lists but
// the checkpoint lacks, an unsupported method or scheme — is an error too.
func Detect(cfg *Config, tensors []statedict.NamedTensor) (*Plan, error) {
	d := &detector{cfg: cfg, byName: map[string]*statedict.Tensor{}, used: map[string]bool{}, plan: &Plan{Config: cfg}}
	for _, nt := range tensors {
		d.names = append(d.names, nt.Name)
		d.byName[nt.Name] = nt.Tensor
	}
	if cfg == nil {
		if w, s, ok := d.looksQuantized(); ok {
			return nil, fmt.Errorf("%w: %s (%s) has a scale tensor %s but the checkpoint has no quantization config (config.json quantization_config or hf_quant_config.json): refusing to guess how to dequantize it",
				ckpterr.ErrUnsupported, w, d.byName[w].DType, s)
		}
		return nil, nil
	}
	var err error
	switch cfg.Method {
	case MethodFP8:
		err = d.fineGrainedFP8()
	case MethodFBGEMM:
		err = d.fbgemm()
	case MethodCompressedTensors:
		err = d.compressedTensors()
	case MethodModelOpt:
		err = d.modelOpt()
	case MethodMXFP4:
		err = d.mxfp4()
	default:
		return nil, fmt.Errorf("%w: quantization method %q (fp8, fbgemm_fp8, compressed-tensors, modelopt, mxfp4 are supported)", ckpterr.ErrUnsupported, cfg.Method)
	}
	if err == nil {
		err = d.finish()
	}
	if err != nil {
		return nil, inputError(err)
	}
	return d.plan, nil
}

// inputError marks err, a quantized checkpoint's tensors or configuration that ckpt cannot
// dequantize, as the input's fault (ckpterr.ErrCorrupt: they disagree with each other)
// unless it says ckpterr.ErrUnsupported (a method, scheme or layout ckpt does not read) or
// is an I/O error.
func inputError(err error) error {
	if ckpterr.CorruptCause(err) && !errors.Is(err, ckpterr.ErrCorrupt) {
		return fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	return err
}

// looksQuantized finds codes with a scale-like sibling: the pattern of a
// quantized checkpoint.
func (d *detector) looksQuantized() (weight, scale string, ok bool) {
	for _, n := range d.names {
		for _, suf := range []string{".weight_scale_inv", ".weight_scale", ".weight_scale_2", ".weight_global_scale"} {
			if base, found := strings.CutSuffix(n, suf); found {
				for _, w := range []string{base + ".weight", base + ".weight_packed"} {
					if t := d.byName[w]; t != nil && (isFP8(t.DType) || isPacked(t.DType)) {
						return w, n, true
					}
				}
			}
		}
		for _, suf := range []string{"_scale_inv", "_scales_inv", "_scale"} {
			if base, found := strings.CutSuffix(n, suf); found {
				if t := d.byName[base]; t != nil && isFP8(t.DType) {
					return base, n, true
				}
			}
		}
		if base, found := strings.CutSuffix(n, "_blocks"); found && d.byName[base+"_scales"] != nil {
			return n, base + "_scales", true
		}
	}
	return "", "", false
}

// tensor returns a tensor that must exist because name names it.
func (d *detector) tensor(name, why string) (*statedict.Tensor, error) {
	t := d.byName[name]
	if t == nil {
		return nil, fmt.Errorf("%s: the %s quantization config needs %s, which the checkpoint does not have", why, d.cfg.Method, name)
	}
	return t, nil
}

// add records a group and marks its members used.
func (d *detector) add(g *Group) error {
	for _, m := range g.Members() {
		if d.used[m] {
			return fmt.Errorf("%s belongs to two quantized groups", m)
		}
		d.used[m] = true
	}
	g.Method = d.cfg.Method
	d.plan.Groups = append(d.plan.Groups, g)
	return nil
}

// fp8 builds an FP8 group of codes w with one scale tensor s, after checking
// dtypes and that s holds one scale per bh×bw tile of the last two dimensions
// (once per leading index, or once for all of them).
func (d *detector) fp8(name, wName, sName string, scheme Scheme, bh, bw int64, r recipe) error {
	w, s := d.byName[wName], d.byName[sName]
	if !isFP8(w.DType) {
		return fmt.Errorf("%s is %s, not float8: the %s config pairs it with scale %s", wName, w.DType, d.cfg.Method, sName)
	}
	if len(w.Shape) < 2 {
		return fmt.Errorf("%s: FP8 codes of shape %v; a matrix or a stack of matrices was expected", wName, w.Shape)
	}
	if !isFloatScale(s.DType) && !isE8M0(s.DType) {
		return fmt.Errorf("%s: scale dtype %s (float32, bfloat16, float16, float8_e8m0fnu or uint8 exponents expected)", sName, s.DType)
	}
	if (r == recipeInScale || r == recipeInTarget) && !isFloatScale(s.DType) {
		return fmt.Errorf("%s: scale dtype %s where %s writes float scales", sName, s.DType, d.cfg.Method)
	}
	rows, cols := w.Shape[len(w.Shape)-2], w.Shape[len(w.Shape)-1]
	if bh <= 0 || bw <= 0 {
		return fmt.Errorf("%s: block %d×%d", wName, bh, bw)
	}
	grid := ceilDiv(rows, bh) * ceilDiv(cols, bw)
	batch := numel(w.Shape[:len(w.Shape)-2])
	if n := numel(s.Shape); n != grid && n != grid*batch {
		return fmt.Errorf("%s: %d scales of shape %v for %s codes of shape %v in %d×%d blocks (want %d or %d)",
			sName, n, s.Shape, wName, w.Shape, bh, bw, grid*batch, grid)
	}
	if r == recipeInScale && s.DType == statedict.Float32 {
		r = recipeF32 // the product in float32 is the float32 recipe
	}
	return d.add(&Group{Name: name, Scheme: scheme, Shape: slices.Clone(w.Shape), Block: []int64{bh, bw},
		Weight: wName, Scales: []string{sName}, recipe: r, format: fp8Format(w.DType),
		weight: w, scales: []*statedict.Tensor{s}})
}

// fineGrainedFP8 handles quant_method "fp8": X.weight + X.weight_scale_inv (and
// fused experts X + X_scale_inv), block size from weight_block_size.
func (d *detector) fineGrainedFP8() error {
	bs := d.cfg.BlockSize
	for _, n := range d.names {
		var wName string
		if base, ok := strings.CutSuffix(n, ".weight_scale_inv"); ok {
			wName = base + ".weight"
		} else if base, ok := strings.CutSuffix(n, "_scale_inv"); ok {
			wName = base
		} else if base, ok := strings.CutSuffix(n, "_scales_inv"); ok {
			wName = base
		} else {
			continue
		}
		w, err := d.tensor(wName, n)
		if err != nil {
			return err
		}
		if isPacked(w.DType) || w.DType == statedict.Int8 {
			return fmt.Errorf("%s: %w: FP4 codes in an fp8 checkpoint", wName, ckpterr.ErrUnsupported)
		}
		rows, cols := lastTwo(w.Shape)
		if bs == nil {
			if err := d.fp8(wName, wName, n, SchemeFP8Tensor, rows, cols, recipeF32); err != nil {
				return err
			}
			continue
		}
		if err := d.fp8(wName, wName, n, SchemeFP8Block, bs[0], bs[1], recipeF32); err != nil {
			return err
		}
		if err := gridShape(n, d.byName[n].Shape, w.Shape, bs); err != nil {
			return err
		}
	}
	return nil
}

// gridShape checks that scale shape s is the block grid of codes shape w exactly:
// the same leading dimensions, then ceil(rows/bh), ceil(cols/bw).
func gridShape(name string, s, w, bs []int64) error {
	want := slices.Clone(w)
	want[len(want)-2] = ceilDiv(w[len(w)-2], bs[0])
	want[len(want)-1] = ceilDiv(w[len(w)-1], bs[1])
	if !slices.Equal(s, want) {
		return fmt.Errorf("%s: scale shape %v, want %v for codes %v in %d×%d blocks", name, s, want, w, bs[0], bs[1])
	}
	return nil
}

// fbgemm handles quant_method "fbgemm_fp8": X.weight [out, in] + X.weight_scale
// [out, 1]; fused experts X [E, R, C] + X_scale [E, 1, C] or, for down_proj,
// [E, C, 1] (quantized transposed, so the scale still follows the last
// dimension, P11).
func (d *detector) fbgemm() error {
	for _, n := range d.names {
		if base, ok := strings.CutSuffix(n, ".weight_scale"); ok {
			wName := base + ".weight"
			w, err := d.tensor(wName, n)
			if err != nil {
				return err
			}
			rows, cols := lastTwo(w.Shape)
			if s := d.byName[n].Shape; len(w.Shape) != 2 || !slices.Equal(s, []int64{rows, 1}) {
				return fmt.Errorf("%s: scale shape %v for codes %v; fbgemm writes [out, 1]", n, s, w.Shape)
			}
			if err := d.fp8(wName, wName, n, SchemeFP8Channel, 1, cols, recipeF32); err != nil {
				return err
			}
			continue
		}
		base, ok := strings.CutSuffix(n, "_scale")
		if !ok || isAux(n) {
			continue
		}
		w := d.byName[base]
		if w == nil || !isFP8(w.DType) {
			continue
		}
		s := d.byName[n].Shape
		if len(w.Shape) != 3 || len(s) != 3 || s[0] != w.Shape[0] ||
			!slices.Equal(s[1:], []int64{1, w.Shape[2]}) && !slices.Equal(s[1:], []int64{w.Shape[2], 1}) {
			return fmt.Errorf("%s: scale shape %v for expert codes %s %v; fbgemm writes [E, 1, C] or [E, C, 1]", n, s, base, w.Shape)
		}
		if err := d.fp8(base, base, n, SchemeFP8Column, w.Shape[1], 1, recipeF32); err != nil {
			return err
		}
	}
	return nil
}

// compressedTensors handles quant_method "compressed-tensors": float-quantized FP8
// (tensor, channel, group and block strategies; computed in the scale's dtype)
// and nvfp4-pack-quantized NVFP4.
func (d *detector) compressedTensors() error {
	formats := d.cfg.ctFormats()
	for _, f := range formats {
		switch f {
		case "float-quantized", "naive-quantized", "nvfp4-pack-quantized", "dense", "mixed-precision":
		default:
			return fmt.Errorf("%w: compressed-tensors format %q (float-quantized and nvfp4-pack-quantized are supported)", ckpterr.ErrUnsupported, f)
		}
	}
	for _, n := range d.names {
		if base, ok := strings.CutSuffix(n, ".weight_zero_point"); ok {
			return fmt.Errorf("%s: %w: asymmetric compressed-tensors weights (with a zero point)", base, ckpterr.ErrUnsupported)
		}
		if base, ok := strings.CutSuffix(n, ".weight_packed"); ok {
			if !slices.Contains(formats, "nvfp4-pack-quantized") {
				return fmt.Errorf("%s: packed weights, but the compressed-tensors formats %v include no nvfp4-pack-quantized", n, formats)
			}
			if err := d.nvfp4(base+".weight", n, base+".weight_scale", base+".weight_global_scale", false); err != nil {
				return err
			}
			continue
		}
		base, ok := strings.CutSuffix(n, ".weight_scale")
		if !ok || d.byName[base+".weight_packed"] != nil {
			continue
		}
		wName := base + ".weight"
		w, err := d.tensor(wName, n)
		if err != nil {
			return err
		}
		if !isFP8(w.DType) {
			return fmt.Errorf("%s is %s: %w: compressed-tensors integer weights", wName, w.DType, ckpterr.ErrUnsupported)
		}
		rows, cols := lastTwo(w.Shape)
		s := d.byName[n].Shape
		var scheme Scheme
		var bh, bw int64
		switch {
		case numel(s) == 1:
			scheme, bh, bw = SchemeFP8Tensor, rows, cols
		case slices.Equal(s, []int64{rows, 1}):
			scheme, bh, bw = SchemeFP8Channel, 1, cols
		default:
			scheme, bh, bw = SchemeFP8Block, 0, 0
			for _, g := range d.cfg.Groups {
				var try []int64
				switch {
				case g.Strategy == "block" && len(g.BlockStructure) == 2:
					try = g.BlockStructure
				case g.Strategy == "group" && g.GroupSize > 0:
					try = []int64{1, g.GroupSize}
				default:
					continue
				}
				if try[0] > 0 && try[1] > 0 && gridShape(n, s, w.Shape, try) == nil {
					bh, bw = try[0], try[1]
					break
				}
			}
			if bh == 0 {
				return fmt.Errorf("%s: scale shape %v fits no tensor, channel, group or block strategy of the config for codes %v", n, s, w.Shape)
			}
		}
		if err := d.fp8(wName, wName, n, scheme, bh, bw, recipeInScale); err != nil {
			return err
		}
	}
	return nil
}

// nvfp4 builds an NVFP4 group: codes [.., R, C/2], float8_e4m3fn scales
// [.., R, C/16] and a one-element float32 global scale (ModelOpt's weight_scale_2
// multiplier, or compressed-tensors' weight_global_scale divisor).
func (d *detector) nvfp4(name, wName, sName, gName string, modelOpt bool) error {
	w, err := d.tensor(wName, name)
	if err != nil {
		return err
	}
	s, err := d.tensor(sName, wName)
	if err != nil {
		return err
	}
	g, err := d.tensor(gName, wName)
	if err != nil {
		return err
	}
	if !isPacked(w.DType) || len(w.Shape) < 2 {
		return fmt.Errorf("%s: NVFP4 codes must be uint8 or float4_e2m1fn_x2 with two or more dimensions, not %s %v", wName, w.DType, w.Shape)
	}
	if s.DType != statedict.Float8E4M3FN {
		return fmt.Errorf("%s: NVFP4 block scales must be float8_e4m3fn, not %s", sName, s.DType)
	}
	if g.DType != statedict.Float32 || numel(g.Shape) != 1 || len(g.Shape) > 1 {
		return fmt.Errorf("%s: the NVFP4 global scale must be one float32 (shape [] or [1]), not %s %v", gName, g.DType, g.Shape)
	}
	shape := slices.Clone(w.Shape)
	shape[len(shape)-1] *= 2
	want := slices.Clone(shape)
	want[len(want)-1] /= 16
	if shape[len(shape)-1]%16 != 0 || !slices.Equal(s.Shape, want) {
		return fmt.Errorf("%s: %w: scale shape %v for codes %s %v (%d values per row); one scale per 16 values along the last dimension, %v, is the supported layout",
			sName, ckpterr.ErrUnsupported, s.Shape, wName, w.Shape, shape[len(shape)-1], want)
	}
	r := recipeNVFP4ModelOpt
	if !modelOpt {
		r = recipeNVFP4CT
		if len(g.Shape) == 0 {
			r = recipeNVFP4CTScalar
		}
	}
	return d.add(&Group{Name: name, Scheme: SchemeNVFP4, Shape: shape, Block: []int64{1, 16}, Weight: wName,
		Scales: []string{sName, gName}, recipe: r, weight: w, scales: []*statedict.Tensor{s, g}})
}

// modelOpt handles quant_method "modelopt": FP8 (per tensor, FP8_PER_CHANNEL_PER_TOKEN
// per row, FP8_PB_WO in 128×128 blocks) and NVFP4, also mixed per layer.
func (d *detector) modelOpt() error {
	algo := d.cfg.Algo
	for _, n := range d.names {
		if base, ok := strings.CutSuffix(n, ".pre_quant_scale"); ok {
			return fmt.Errorf("%s: %w: AWQ pre-quantization scales (NVFP4_AWQ)", base, ckpterr.ErrUnsupported)
		}
		base, ok := strings.CutSuffix(n, ".weight_scale")
		if !ok {
			continue
		}
		wName := base + ".weight"
		w, err := d.tensor(wName, n)
		if err != nil {
			return err
		}
		layerAlgo := algo
		if d.cfg.LayerAlgos != nil {
			if layerAlgo = d.cfg.LayerAlgos[base]; layerAlgo == "" {
				return fmt.Errorf("%s is quantized but hf_quant_config.json's quantized_layers does not list %s", wName, base)
			}
		}
		if isPacked(w.DType) {
			if !strings.Contains(layerAlgo, "NVFP4") {
				return fmt.Errorf("%s: packed FP4 codes where the config says %s", wName, layerAlgo)
			}
			if err := d.nvfp4(wName, wName, n, base+".weight_scale_2", true); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(layerAlgo, "FP8") {
			return fmt.Errorf("%s is %s where the config says %s: %w (FP8 and NVFP4 are supported)", wName, w.DType, layerAlgo, ckpterr.ErrUnsupported)
		}
		rows, cols := lastTwo(w.Shape)
		s := d.byName[n].Shape
		switch {
		case numel(s) == 1:
			err = d.fp8(wName, wName, n, SchemeFP8Tensor, rows, cols, recipeInTarget)
		case len(w.Shape) == 2 && slices.Equal(s, []int64{rows}):
			err = d.fp8(wName, wName, n, SchemeFP8Channel, 1, cols, recipeInTarget)
		case len(w.Shape) == 2 && slices.Equal(s, []int64{ceilDiv(rows, 128), 1, ceilDiv(cols, 128), 1}):
			err = d.fp8(wName, wName, n, SchemeFP8Block, 128, 128, recipeInTarget)
		default:
			err = fmt.Errorf("%s: scale shape %v for codes %v (ModelOpt writes [], [out] or [out/128, 1, in/128, 1])", n, s, w.Shape)
		}
		if err != nil {
			return err
		}
	}
	for layer := range d.cfg.LayerAlgos {
		if !d.used[layer+".weight"] {
			return fmt.Errorf("hf_quant_config.json lists quantized layer %s, but the checkpoint has no quantized %s.weight", layer, layer)
		}
	}
	return nil
}

// mxfp4 handles quant_method "mxfp4" (gpt-oss): X_blocks uint8 [E, out, G, 16] +
// X_scales [E, out, G] become X [E, G·32, out].
func (d *detector) mxfp4() error {
	for _, n := range d.names {
		base, ok := strings.CutSuffix(n, "_blocks")
		if !ok {
			continue
		}
		b := d.byName[n]
		sName := base + "_scales"
		s, err := d.tensor(sName, n)
		if err != nil {
			return err
		}
		if !isPacked(b.DType) || len(b.Shape) != 4 || b.Shape[3] != 16 {
			return fmt.Errorf("%s: MXFP4 blocks must be uint8 [experts, out, groups, 16], not %s %v", n, b.DType, b.Shape)
		}
		if !isE8M0(s.DType) || !slices.Equal(s.Shape, b.Shape[:3]) {
			return fmt.Errorf("%s: MXFP4 scales must be uint8 or float8_e8m0fnu %v, not %s %v", sName, b.Shape[:3], s.DType, s.Shape)
		}
		if err := d.add(&Group{Name: base, Scheme: SchemeMXFP4, Shape: []int64{b.Shape[0], b.Shape[2] * 32, b.Shape[1]},
			Block: []int64{1, 32}, Weight: n, Scales: []string{sName}, recipe: recipeMXFP4,
			weight: b, scales: []*statedict.Tensor{s}}); err != nil {
			return err
		}
	}
	for _, n := range d.names {
		if base, ok := strings.CutSuffix(n, "_scales"); ok && !d.used[n] && d.byName[base+"_blocks"] == nil {
			if t := d.byName[n]; isE8M0(t.DType) {
				return fmt.Errorf("%s: MXFP4 scales without %s_blocks", n, base)
			}
		}
	}
	return nil
}

func isAux(name string) bool {
	for _, suf := range auxSuffixes {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// finish collects the runtime-only scales and checks that every FP8 tensor and
// every scale-like tensor belongs to a group.
func (d *detector) finish() error {
	for _, n := range d.names {
		if d.used[n] {
			continue
		}
		if isAux(n) {
			d.plan.Aux = append(d.plan.Aux, n)
			continue
		}
		if t := d.byName[n]; isFP8(t.DType) {
			return fmt.Errorf("%s is %s but has no scale the %s config accounts for", n, t.DType, d.cfg.Method)
		}
		for _, suf := range scaleSuffixes {
			if strings.HasSuffix(n, suf) {
				return fmt.Errorf("%s looks like part of a quantized tensor, but the %s config gives no tensor it belongs to", n, d.cfg.Method)
			}
		}
	}
	if len(d.plan.Groups) == 0 {
		return fmt.Errorf("the checkpoint has a %s quantization config but no quantized tensors", d.cfg.Method)
	}
	return nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// lastTwo returns the last two dimensions of shape (rows, cols); a shorter shape
// counts as one row.
func lastTwo(shape []int64) (rows, cols int64) {
	switch len(shape) {
	case 0:
		return 1, 1
	case 1:
		return 1, shape[0]
	}
	return shape[len(shape)-2], shape[len(shape)-1]
}
