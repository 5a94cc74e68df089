package runtime

import (
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

func TestLookupGeneration(t *testing.T) {
	for name, want := range map[string]string{
		"v4": "v4", "v5e": "v5e", "v5litepod": "v5e", "V5LITE": "v5e", "v5p": "v5p",
		"v6e": "v6e", "trillium": "v6e", "tpu7x": "tpu7x", "v7x": "tpu7x", "Ironwood": "tpu7x", "7x": "tpu7x",
	} {
		g, err := LookupGeneration(name)
		if err != nil || g.Name != want {
			t.Errorf("LookupGeneration(%q) = %v, %v; want %s", name, g, err, want)
		}
	}
	for _, name := range []string{"", "v3", "v5", "v8", "tpu"} {
		if g, err := LookupGeneration(name); err == nil {
			t.Errorf("LookupGeneration(%q) = %v", name, g)
		}
	}
}

// TestCatalogue checks the catalogue against the public figures it cites (tpu.md §2.1):
// per-chip HBM in GiB and what a device gets of it.
func TestCatalogue(t *testing.T) {
	for _, tc := range []struct {
		gen             string
		hbmChipGiB      int64
		devicesPerChip  int
		hbmDeviceGiB    int64
		large16BitTiles bool
	}{
		{"v4", 32, 1, 32, false},
		{"v5e", 16, 1, 16, false},
		{"v5p", 95, 1, 95, false},
		{"v6e", 32, 1, 32, false},
		{"tpu7x", 192, 2, 96, true},
	} {
		g, _ := LookupGeneration(tc.gen)
		if g.HBMPerChip != tc.hbmChipGiB*GiB || g.DevicesPerChip != tc.devicesPerChip || g.HBMPerDevice() != tc.hbmDeviceGiB*GiB || g.Large16BitTiles != tc.large16BitTiles {
			t.Errorf("%s: %d B/chip, %d devices/chip, %d B/device, large 16-bit tiles %v", g, g.HBMPerChip, g.DevicesPerChip, g.HBMPerDevice(), g.Large16BitTiles)
		}
	}
}

// TestNativeWeights is jax's is_matmul_supported, asked the converter's question: which
// stored weight dtypes feed the MXU as they are.
func TestNativeWeights(t *testing.T) {
	for _, tc := range []struct {
		dtype  statedict.DType
		native []string
	}{
		{statedict.BFloat16, []string{"v4", "v5e", "v5p", "v6e", "tpu7x"}},
		{statedict.Float32, []string{"v4", "v5e", "v5p", "v6e", "tpu7x"}},
		{statedict.Float16, nil},
		{statedict.Float8E4M3FN, []string{"tpu7x"}},
		{statedict.Float8E5M2, []string{"v5e", "v5p", "v6e", "tpu7x"}},
		{statedict.Float8E4M3FNUZ, nil},
		{statedict.Float4E2M1FNx2, nil},
		{statedict.Float8E8M0FNU, nil},
		{statedict.Int8, []string{"v4", "v5e", "v5p", "v6e"}},
		{statedict.Uint8, []string{"v5e", "v5p", "v6e"}},
		{statedict.Int4, []string{"v5e", "v5p", "v6e"}},
	} {
		var got []string
		for _, g := range Generations() {
			if g.NativeWeight(tc.dtype) {
				got = append(got, g.Name)
			}
		}
		if !slices.Equal(got, tc.native) {
			t.Errorf("%s native on %v, want %v", tc.dtype, got, tc.native)
		}
	}
	v6e, _ := LookupGeneration("v6e")
	v7, _ := LookupGeneration("tpu7x")
	if !v6e.MatmulNative("float8_e4m3b11fnuz", "float8_e5m2") || v7.MatmulNative("float8_e4m3b11fnuz", "float8_e4m3b11fnuz") {
		t.Error("e4m3b11fnuz is native on v5/v6 only")
	}
	if v7.MatmulNative("float8_e4m3fn", "bfloat16") || !v7.MatmulNative("bfloat16", "float8_e4m3fn") {
		t.Error("TPU7x multiplies fp8 by bf16 only with the fp8 operand on the right")
	}
}

// TestPaddedBytes: sizes computed by hand from the tiling rule — last two dims rounded up
// to (8·32/bits, 128), except 16-bit at 8 rows before TPU7x; vectors to 1024 elements,
// scalars 128.
func TestPaddedBytes(t *testing.T) {
	v5e, _ := LookupGeneration("v5e")
	v7, _ := LookupGeneration("tpu7x")
	for _, tc := range []struct {
		g     *Generation
		dtype statedict.DType
		shape []int64
		want  int64
	}{
		{v5e, statedict.BFloat16, []int64{100, 100}, 104 * 128 * 2},          // rows to 8, cols to 128
		{v7, statedict.BFloat16, []int64{100, 100}, 112 * 128 * 2},           // rows to 16 on TPU7x
		{v5e, statedict.Float32, []int64{3, 5, 7}, 3 * 8 * 128 * 4},          // leading dim as is
		{v7, statedict.Float32, []int64{16, 256}, 16 * 256 * 4},              // already whole tiles
		{v5e, statedict.Int8, []int64{1, 1}, 32 * 128},                       // 8-bit: 32 rows
		{v7, statedict.Float8E4M3FN, []int64{40, 130}, 64 * 256},             // 40→64 rows, 130→256 cols
		{v5e, statedict.Float8E4M3FN, []int64{2, 7, 33, 129}, 14 * 64 * 256}, // 33→64, 129→256
		{v5e, statedict.Float32, []int64{4096, 1}, 4096 * 128 * 4},           // a bias column: [N,1] → [N,128]
		{v5e, statedict.BFloat16, []int64{64, 64}, 64 * 128 * 2},             // head_dim 64 wastes half
		{v5e, statedict.Float32, []int64{4096}, 4096 * 4},                    // vector, whole T(1024)
		{v7, statedict.BFloat16, []int64{100}, 1024 * 2},                     // vector to 1024
		{v5e, statedict.Float32, []int64{}, 128 * 4},                         // scalar T(128)
		{v5e, statedict.Float32, []int64{0, 5}, 0},                           // empty
		{v5e, statedict.Float64, []int64{9, 1}, 16 * 128 * 8},                // 64-bit: 8 rows
	} {
		if got := tc.g.PaddedBytes(tc.dtype, tc.shape); got != tc.want {
			t.Errorf("%s %s%v: %d bytes, want %d", tc.g, tc.dtype, tc.shape, got, tc.want)
		}
	}
}

func TestParseTopology(t *testing.T) {
	for _, tc := range []struct {
		in                    string
		gen, accel, shape     string
		chips, devices, hosts int
		devicesPerHost        int
	}{
		{"v5litepod-16", "v5e", "v5litepod-16", "4x4", 16, 16, 4, 4},
		{"v5e-8", "v5e", "v5litepod-8", "2x4", 8, 8, 1, 8},
		{"v5e-1", "v5e", "v5litepod-1", "1x1", 1, 1, 1, 1},
		{"v5p-8", "v5p", "v5p-8", "2x2x1", 4, 4, 1, 4},
		{"v5p-32", "v5p", "v5p-32", "2x2x4", 16, 16, 4, 4},
		{"v5p-128", "v5p", "v5p-128", "4x4x4", 64, 64, 16, 4},
		{"v6e-8", "v6e", "v6e-8", "2x4", 8, 8, 1, 8},
		{"trillium-16", "v6e", "v6e-16", "4x4", 16, 16, 4, 4},
		{"v6e-256", "v6e", "v6e-256", "16x16", 256, 256, 64, 4},
		{"v4-8", "v4", "v4-8", "2x2x1", 4, 4, 1, 4},
		{"v4-32", "v4", "v4-32", "2x2x4", 16, 16, 4, 4},
		{"tpu7x-8", "tpu7x", "tpu7x-8", "2x2x1", 4, 8, 1, 8},
		{"v7x-16", "tpu7x", "tpu7x-16", "2x2x2", 8, 16, 2, 8},
		{"ironwood-2", "tpu7x", "tpu7x-2", "1x1x1", 1, 2, 1, 2},
		{"tpu7x-4", "tpu7x", "tpu7x-4", "1x2x1", 2, 4, 1, 4},
		{"v5p:2x2x2", "v5p", "v5p-16", "2x2x2", 8, 8, 2, 4},
		{"v5p:2x2x3", "v5p", "v5p-24", "2x2x3", 12, 12, 3, 4},
		{"v6e:4x8", "v6e", "v6e-32", "4x8", 32, 32, 8, 4},
		{"tpu7x:2x2x1", "tpu7x", "tpu7x-8", "2x2x1", 4, 8, 1, 8},
		// TORCH_TPU_TOPOLOGY forms (TorchTPU hardware.py single-host maps)
		{"v6e:2,4,1", "v6e", "v6e-8", "2x4", 8, 8, 1, 8},
		{"v5e:2,2,2", "v5e", "v5litepod-8", "2x4", 8, 8, 1, 8},
		{"v5e:2,2,1", "v5e", "v5litepod-4", "2x2", 4, 4, 1, 4},
		{"v5p:2,2,1", "v5p", "v5p-8", "2x2x1", 4, 4, 1, 4},
		{"v6e:4,4,1", "v6e", "v6e-16", "4x4", 16, 16, 4, 4},
		{"tpu7x:2,2,1,2", "tpu7x", "tpu7x-8", "2x2x1", 4, 8, 1, 8},
		{"tpu7x:1,1,1,2", "tpu7x", "tpu7x-2", "1x1x1", 1, 2, 1, 2},
		{" V5P-32 ", "v5p", "v5p-32", "2x2x4", 16, 16, 4, 4},
	} {
		top, err := ParseTopology(tc.in)
		if err != nil {
			t.Errorf("ParseTopology(%q): %v", tc.in, err)
			continue
		}
		if top.Gen.Name != tc.gen || top.AcceleratorType() != tc.accel || top.ShapeString() != tc.shape ||
			top.Chips != tc.chips || top.Devices != tc.devices || top.Hosts != tc.hosts || top.DevicesPerHost() != tc.devicesPerHost {
			t.Errorf("ParseTopology(%q) = %s %s %s: %d chips, %d devices, %d hosts, %d per host", tc.in, top.Gen, top.AcceleratorType(), top.ShapeString(), top.Chips, top.Devices, top.Hosts, top.DevicesPerHost())
		}
	}
	for in, why := range map[string]string{
		"v5p-7":         "whole number of chips",
		"v5p-24":        "power of two",
		"v6e-512":       "pod",
		"v6e:2x2x1":     "2 axes",
		"v5p:2x2":       "3 axes",
		"tpu7x:2,2,1":   "4 entries",
		"tpu7x:2,2,1,4": "4 entries",
		"v5p:2,2":       "3 entries",
		"v9-8":          "generation",
		"v5p":           "accelerator type",
		"v5p-0":         "positive",
		"v5p-x":         "positive",
		"v6e:0x4":       "between 1 and",
		"v5p:1x2x3":     "whole number of 4-chip",
		"v5e:3,1,1":     "not a v5e slice",
		"v5p:99999x1x1": "between 1 and",
	} {
		if _, err := ParseTopology(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseTopology(%q) = %v, want an error about %q", in, err, why)
		}
	}
}

func TestTopologyDevices(t *testing.T) {
	top, _ := ParseTopology("tpu7x-16")
	for _, tc := range []struct{ device, host, chip, core int }{{0, 0, 0, 0}, {1, 0, 0, 1}, {7, 0, 3, 1}, {8, 1, 4, 0}, {15, 1, 7, 1}} {
		chip, core := top.Chip(tc.device)
		if h := top.Host(tc.device); h != tc.host || chip != tc.chip || core != tc.core {
			t.Errorf("device %d: host %d, chip %d core %d; want %+v", tc.device, h, chip, core, tc)
		}
	}
	if first, n := top.HostDevices(1); first != 8 || n != 8 {
		t.Errorf("host 1 drives %d from %d", n, first)
	}
	if top.HBMPerDevice() != 96*GiB {
		t.Errorf("%d bytes per TPU7x device", top.HBMPerDevice())
	}
}

func FuzzParseTopology(f *testing.F) {
	for _, s := range []string{"v5p-32", "v6e:2x4", "tpu7x:2,2,1,2", "v5e:2,2,2", "trillium-256", "v4:4x4x4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		top, err := ParseTopology(s)
		if err != nil {
			return
		}
		if top.Chips <= 0 || top.Chips > top.Gen.MaxChips || top.Devices != top.Chips*top.Gen.DevicesPerChip || top.Devices%top.Hosts != 0 {
			t.Fatalf("%q: inconsistent %+v", s, top)
		}
		again, err := ParseTopology(top.Gen.Name + ":" + top.ShapeString())
		if err != nil || again.Chips != top.Chips || again.Hosts != top.Hosts {
			t.Fatalf("%q: %s does not parse back: %v", s, top.ShapeString(), err)
		}
	})
}

func TestParseMesh(t *testing.T) {
	m, err := ParseMesh(" dp=2, fsdp=2 ,tp=2")
	if err != nil || m.String() != "dp=2,fsdp=2,tp=2" || m.Size() != 8 || !slices.Equal(m.Shape(), []int{2, 2, 2}) || m.Index("tp") != 2 || m.Index("ep") != -1 {
		t.Fatalf("ParseMesh: %v %v", m, err)
	}
	// Row-major: the last axis varies fastest, as torch.arange(8).view(2, 2, 2).
	for r, want := range [][]int{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}} {
		if c := m.Coord(r); !slices.Equal(c, want) || m.Rank(c) != r {
			t.Errorf("rank %d at %v, want %v", r, c, want)
		}
	}
	for _, in := range []string{"", "fsdp", "fsdp=0", "fsdp=-2", "fsdp=x", "FSDP=2", "1a=2", "tp=2,tp=2", "a=256,b=256,c=2", "fsdp=8,"} {
		if m, err := ParseMesh(in); err == nil {
			t.Errorf("ParseMesh(%q) = %v", in, m)
		}
	}
	// The data-parallel degree: dp × fsdp × ep (ep borrowed from the data-parallel ranks);
	// tp and cp ranks read the same data.
	for in, want := range map[string]int{"dp=2,fsdp=2,tp=2": 4, "fsdp=4": 4, "tp=8": 1, "ep=2,fsdp=2,cp=2": 4, "dp_replicate=2,dp_shard=3": 6} {
		if m, _ := ParseMesh(in); m.DataParallel() != want {
			t.Errorf("%s: data-parallel degree %d, want %d", in, m.DataParallel(), want)
		}
	}
	top, _ := ParseTopology("tpu7x-8")
	if err := m.Check(top); err != nil {
		t.Errorf("8 ranks on tpu7x-8's 8 devices: %v", err)
	}
	top, _ = ParseTopology("v5p-8")
	if err := m.Check(top); err == nil || !strings.Contains(err.Error(), "4 devices") {
		t.Errorf("8 ranks on 4 devices: %v", err)
	}
}

func FuzzParseMesh(f *testing.F) {
	for _, s := range []string{"fsdp=8", "dp=2,fsdp=2,tp=2", "a=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMesh(s)
		if err != nil {
			return
		}
		again, err := ParseMesh(m.String())
		if err != nil || again.String() != m.String() || m.Size() > maxRanks {
			t.Fatalf("%q: %v does not round-trip: %v", s, m, err)
		}
	})
}
