package runtime

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// GiB is 2³⁰ bytes.
const GiB = 1 << 30

// Generation is one TPU generation as a converter needs it: memory per device, how chips
// become devices and hosts, what its matrix units multiply natively and how XLA tiles arrays
// in its HBM.
//
// Sources (research notes tpu.md §2): Google Cloud's per-generation pages for HBM, cores,
// hosts and slice shapes (https://cloud.google.com/tpu/docs/v4, …/v5e, …/v5p-training,
// …/v6e, …/tpu7x); JAX's TPU table jax/_src/tpu_info.py (ChipVersion, TpuInfo,
// is_matmul_supported, get_sublane_tiling) for the MXU dtypes and the tiling rule.
type Generation struct {
	// Name is the canonical name ("v5e", "tpu7x"); Aliases are the other accepted names.
	Name    string
	Aliases []string
	// Family is the marketing name ("Trillium", "Ironwood"), empty when there is none.
	Family string
	// AcceleratorPrefix names slices in Cloud TPU accelerator types: v5litepod-16, tpu7x-8.
	AcceleratorPrefix string
	// TypeCountsCores is true when the number in an accelerator type counts TensorCores (v4,
	// v5p, TPU7x: v5p-32 is 16 chips) rather than chips (v5e, v6e: v6e-8 is 8 chips).
	TypeCountsCores bool

	// HBMPerChip is the chip's HBM in bytes as Google lists it (GiB).
	HBMPerChip int64
	// TensorCoresPerChip is the physical TensorCore count.
	TensorCoresPerChip int
	// DevicesPerChip is how many devices (and TorchTPU processes) a chip is: 1 for v4 and
	// v5p, whose two TensorCores form one megacore device, and for the one-core v5e and
	// v6e; 2 for TPU7x, whose two chiplets are separate devices without megacore (the
	// world size is twice the chip count and each device has half the HBM).
	DevicesPerChip int

	// ChipsPerHost is the chips one host (TPU VM, one worker) drives in a multi-host slice.
	ChipsPerHost int
	// SingleHostChips is the largest slice one host drives alone: v5e and v6e hosts take
	// up to 8 chips (v6e-8, v5litepod-8) but multi-host slices use 4-chip VMs.
	SingleHostChips int
	// TopologyDims is 2 for the 2D-torus generations (topology "4x4"), 3 otherwise ("2x2x1").
	TopologyDims int
	// MaxChips is the largest slice ckpt accepts: the pod size.
	MaxChips int

	// MXU lists the (lhs, rhs) dtype sets the matrix units multiply natively, in torch /
	// ml_dtypes names ("bfloat16", "float8_e4m3fn", "float8_e4m3b11fnuz", "int4").
	MXU []MatmulRule
	// Large16BitTiles is true when XLA tiles 16-bit arrays with 16 sublanes by default
	// (from TPU7x on); before it keeps them at 8 unless the flag
	// xla_tpu_enable_large_2nd_minor_layout_for_x16 is set (jax tpu_info.get_sublane_tiling).
	Large16BitTiles bool
}

// MatmulRule is one family of native matrix-unit operand types: any lhs of LHS with any
// rhs of RHS.
type MatmulRule struct {
	LHS, RHS []string
}

// The operand type sets of jax's TpuInfo.is_matmul_supported, by generation.
var (
	mxuFloat = []string{"float32", "bfloat16"}
	mxuGen4  = []MatmulRule{{mxuFloat, []string{"float32", "bfloat16", "int8"}}}
	mxuGen5f = []string{"float32", "bfloat16", "float8_e5m2", "float8_e4m3b11fnuz"}
	mxuGen56 = []MatmulRule{{mxuGen5f, mxuGen5f}, {[]string{"uint8", "int8"}, []string{"uint8", "int8"}}, {[]string{"uint4", "int4"}, []string{"uint4", "int4"}}}
	mxuFP8v7 = []string{"float8_e5m2", "float8_e4m3fn"}
	mxuGen7  = []MatmulRule{{mxuFloat, append(slices.Clone(mxuFloat), mxuFP8v7...)}, {mxuFP8v7, mxuFP8v7}}
)

// generations is the catalogue. No generation multiplies FP4 (e2m1) natively; FP8
// e4m3fn (the OCP format GPU checkpoints use) only TPU7x does — v5e, v5p and v6e take
// e5m2 and e4m3b11fnuz instead.
var generations = []*Generation{
	{
		Name: "v4", AcceleratorPrefix: "v4", TypeCountsCores: true,
		HBMPerChip: 32 * GiB, TensorCoresPerChip: 2, DevicesPerChip: 1,
		ChipsPerHost: 4, SingleHostChips: 4, TopologyDims: 3, MaxChips: 4096,
		MXU: mxuGen4,
	},
	{
		Name: "v5e", Aliases: []string{"v5litepod", "v5lite"}, AcceleratorPrefix: "v5litepod",
		HBMPerChip: 16 * GiB, TensorCoresPerChip: 1, DevicesPerChip: 1,
		ChipsPerHost: 4, SingleHostChips: 8, TopologyDims: 2, MaxChips: 256,
		MXU: mxuGen56,
	},
	{
		Name: "v5p", AcceleratorPrefix: "v5p", TypeCountsCores: true,
		HBMPerChip: 95 * GiB, TensorCoresPerChip: 2, DevicesPerChip: 1,
		ChipsPerHost: 4, SingleHostChips: 4, TopologyDims: 3, MaxChips: 8960,
		MXU: mxuGen56,
	},
	{
		Name: "v6e", Aliases: []string{"trillium"}, Family: "Trillium", AcceleratorPrefix: "v6e",
		HBMPerChip: 32 * GiB, TensorCoresPerChip: 1, DevicesPerChip: 1,
		ChipsPerHost: 4, SingleHostChips: 8, TopologyDims: 2, MaxChips: 256,
		MXU: mxuGen56,
	},
	{
		Name: "tpu7x", Aliases: []string{"v7x", "ironwood", "7x"}, Family: "Ironwood", AcceleratorPrefix: "tpu7x", TypeCountsCores: true,
		HBMPerChip: 192 * GiB, TensorCoresPerChip: 2, DevicesPerChip: 2,
		ChipsPerHost: 4, SingleHostChips: 4, TopologyDims: 3, MaxChips: 9216,
		MXU: mxuGen7, Large16BitTiles: true,
	},
}

// Generations returns the catalogue, oldest first.
func Generations() []*Generation { return slices.Clone(generations) }

// LookupGeneration finds a generation by name or alias, case-insensitively: v4, v5e
// (v5litepod), v5p, v6e (trillium), tpu7x (v7x, ironwood).
func LookupGeneration(name string) (*Generation, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, g := range generations {
		if n == g.Name || slices.Contains(g.Aliases, n) {
			return g, nil
		}
	}
	return nil, fmt.Errorf("TPU generation %q: one of %s", name, GenerationNames())
}

// GenerationNames lists the generations with their aliases, oldest first, for messages:
// "v4, v5e (v5litepod), …".
func GenerationNames() string {
	var s []string
	for _, g := range generations {
		n := g.Name
		if len(g.Aliases) > 0 {
			n += " (" + strings.Join(g.Aliases, ", ") + ")"
		}
		s = append(s, n)
	}
	return strings.Join(s, ", ")
}

// String returns the canonical name.
func (g *Generation) String() string { return g.Name }

// HBMPerDevice is the HBM one device (one TorchTPU process) owns: the chip's HBM divided by
// the devices it exposes.
func (g *Generation) HBMPerDevice() int64 { return g.HBMPerChip / int64(g.DevicesPerChip) }

// MatmulNative reports whether the matrix units multiply lhs by rhs natively (dtype names
// as torch and ml_dtypes spell them: "bfloat16", "float8_e4m3fn", "int8").
func (g *Generation) MatmulNative(lhs, rhs string) bool {
	for _, r := range g.MXU {
		if slices.Contains(r.LHS, lhs) && slices.Contains(r.RHS, rhs) {
			return true
		}
	}
	return false
}

// NativeWeight reports whether a weight stored as d feeds the matrix units as it is: as the
// right operand against bfloat16 activations, or against activations quantized to d itself.
// This is the question a converter asks before deciding to keep or unpack quantized weights:
// float8_e4m3fn is native only on TPU7x, float4_e2m1fn_x2 nowhere.
func (g *Generation) NativeWeight(d statedict.DType) bool {
	n := d.String()
	return g.MatmulNative("bfloat16", n) || g.MatmulNative(n, n)
}

// Lanes is the minor tile dimension of every TPU array layout: 128 lanes.
const Lanes = 128

// sublanes is the number of 32-bit sublanes of a vector register, the second-minor tile
// dimension of 32-bit arrays (jax tpu_info: NUM_SUBLANES = 8 on every generation here).
const sublanes = 8

// vectorTile is the tile of rank-1 arrays: XLA lays vectors out as T(1024) (one 8×128
// vreg of elements), as HLO dumps show for f32, s32 and bf16 vectors
// (s32[2048]{0:T(1024)}, bf16[6144]{0:T(1024)(128)(2,1)}).
const vectorTile = sublanes * Lanes

// scalarTile is the footprint of a rank-0 array: T(128) (f32[]{:T(128)} in HLO dumps).
const scalarTile = Lanes

// Tile is the tile XLA pads the last two dimensions of a dtype's arrays to in HBM: 128 lanes
// by 8·32/bits sublanes — (8,128) for 32-bit, (16,128) for 16-bit, (32,128) for 8-bit,
// (64,128) for 4-bit — except that before TPU7x 16-bit arrays keep 8 sublanes (jax
// tpu_info.get_sublane_tiling: "before TPU7x, by default XLA does not use large 2nd minor
// tiling" for 16-bit; the XLA flag xla_tpu_enable_large_2nd_minor_layout_for_x16 changes
// it, reported as Large16BitTiles). 64-bit types, which TPUs emulate, get 8 sublanes. The
// bit width is torch's element size: a float4_e2m1fn_x2 element is one byte.
func (g *Generation) Tile(d statedict.DType) (rows, cols int64) {
	bits := d.Size() * 8
	switch {
	case bits >= 32:
		return sublanes, Lanes
	case bits == 16 && !g.Large16BitTiles:
		return sublanes, Lanes
	case bits <= 0:
		return sublanes, Lanes
	}
	return int64(sublanes * 32 / bits), Lanes
}

// PaddedBytes is the HBM a tensor of dtype d and shape occupies once XLA tiles it: the last
// two dimensions rounded up to the Tile, the leading ones as they are (XLA pads each
// dimension to whole tiles; https://openxla.org/xla/tiled_layout). A rank-1 tensor is
// rounded up to 1024 elements and a scalar takes 128 elements, the T(1024) and T(128)
// layouts XLA gives vectors and scalars. An empty tensor takes nothing. These are the
// default layouts; XLA may choose others for a given program, so this is an estimate of
// the resident size, not a promise.
func (g *Generation) PaddedBytes(d statedict.DType, shape []int64) int64 {
	size := int64(d.Size())
	for _, n := range shape {
		if n == 0 {
			return 0
		}
	}
	switch len(shape) {
	case 0:
		return scalarTile * size
	case 1:
		return roundUp(shape[0], vectorTile) * size
	}
	rows, cols := g.Tile(d)
	n := len(shape)
	el := roundUp(shape[n-2], rows) * roundUp(shape[n-1], cols)
	for _, x := range shape[:n-2] {
		el *= x
	}
	return el * size
}

// RawBytes is the size of a tensor's elements without padding.
func RawBytes(d statedict.DType, shape []int64) int64 {
	n := int64(d.Size())
	for _, x := range shape {
		n *= x
	}
	return n
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }
