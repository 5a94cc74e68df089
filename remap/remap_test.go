package remap

import (
	"encoding/binary"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

func tensor(dt statedict.DType, loc string, n int64) *statedict.Tensor {
	st := statedict.NewMappedStorage("k", loc, dt, make([]byte, n*int64(dt.Size())))
	return &statedict.Tensor{DType: dt, Shape: []int64{n}, Strides: []int64{1}, Storage: st}
}

func dict(kv ...any) *statedict.Dict {
	d := statedict.NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

func names(t *testing.T, v statedict.Value) string {
	t.Helper()
	leaves, err := statedict.Flatten(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range leaves {
		out = append(out, l.Name)
	}
	return strings.Join(out, " ")
}

func TestParseMapLocation(t *testing.T) {
	cases := []struct {
		flag, tag, want, err string
	}{
		{"tpu", "cuda:0", "tpu", ""},
		{"cpu", "cuda:3", "cpu", ""},
		{"tpu:1", "cpu", "tpu:1", ""},
		{"cuda:0=tpu,cuda:1=tpu", "cuda:1", "tpu", ""},
		{"cuda:0=tpu", "cuda:1", "cuda:1", ""}, // exact tags, as torch's dict map_location
		{"gpu", "", "", "not a device tag"},
		{"cuda:0=tpu,cuda:0=cpu", "", "", "twice"},
		{"cuda=", "", "", "FROM=TO"},
	}
	for _, c := range cases {
		f, err := ParseMapLocation(c.flag)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.flag, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.flag, err)
		}
		if got, _ := f(c.tag); got != c.want {
			t.Errorf("%q maps %s to %s, want %s", c.flag, c.tag, got, c.want)
		}
	}
}

func TestApplyNames(t *testing.T) {
	re := regexp.MustCompile
	cases := []struct {
		name string
		root statedict.Value
		opts Options
		want string // flattened names after remapping
		err  string
	}{
		{"strip DDP and compile prefixes", dict("_orig_mod.module.a", tensor(statedict.Float32, "cpu", 1), "_orig_mod.module.b", tensor(statedict.Float32, "cpu", 1)),
			Options{StripWrappers: true}, "a b", ""},
		{"no strip when one name lacks the prefix", dict("module.a", tensor(statedict.Float32, "cpu", 1), "b", tensor(statedict.Float32, "cpu", 1)),
			Options{StripWrappers: true}, "module.a b", ""},
		{"rename in order", dict("model.layers.0.w", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^model\.`), ""}, {re(`layers\.(\d+)`), "blocks.$1"}}}, "blocks.0.w", ""},
		{"rename collision", dict("a.w", tensor(statedict.Float32, "cpu", 1), "b.w", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^[ab]\.`), ""}}}, "", `both "a.w" and "b.w"`},
		{"rename hitting nothing", dict("a", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^zzz`), ""}}}, "", "matched no tensor name"},
		{"select and drop", dict("state_dict", dict("w", tensor(statedict.Float32, "cpu", 1), "rotary.inv_freq", tensor(statedict.Float32, "cpu", 1)), "epoch", int64(3)),
			Options{Select: "state_dict", Drop: []*regexp.Regexp{re(`inv_freq$`)}}, "w", ""},
		{"select missing key", dict("model", dict()), Options{Select: "state_dict"}, "", `no key "state_dict" (keys: model)`},
		{"optimizer state keys are not renamed", dict("optimizer", dict("state", dict(int64(0), dict("exp_avg", tensor(statedict.Float32, "cpu", 1))), "param_groups", &statedict.List{})),
			Options{Renames: []Rename{{re(`exp`), "x"}}}, "", "matched no tensor name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := Apply(c.root, c.opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(t, out); got != c.want {
				t.Errorf("names %q, want %q", got, c.want)
			}
		})
	}
}

// TestApplyStorages checks locations, casts and what is left alone: integer tensors,
// fp8 codes, optimizer moments and step counters; and that shared storages stay shared.
func TestApplyStorages(t *testing.T) {
	w := tensor(statedict.Float32, "cuda:0", 4)
	tied := *w // a second tensor object viewing the same storage
	step := tensor(statedict.Float32, "cpu", 1)
	step.Shape, step.Strides = []int64{}, []int64{}
	root := dict(
		"model", dict("w", w, "lm_head", &tied, "idx", tensor(statedict.Int64, "cuda:0", 2), "fp8", tensor(statedict.Float8E4M3FN, "cuda:0", 2)),
		"optimizer", dict("state", dict(int64(0), dict("step", step, "exp_avg", tensor(statedict.Float32, "cuda:0", 4))), "param_groups", &statedict.List{}),
	)
	loc, _ := ParseMapLocation("tpu")
	out, rep, err := Apply(root, Options{Location: loc, DType: statedict.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path ...any) *statedict.Tensor {
		v := statedict.Value(out)
		for _, p := range path {
			v, _ = v.(*statedict.Dict).Get(p)
		}
		return v.(*statedict.Tensor)
	}
	checks := []struct {
		t         *statedict.Tensor
		dtype     statedict.DType
		loc, what string
	}{
		{get("model", "w"), statedict.BFloat16, "tpu", "weight cast and moved"},
		{get("model", "idx"), statedict.Int64, "tpu", "int64 not cast"},
		{get("model", "fp8"), statedict.Float8E4M3FN, "tpu", "fp8 codes not cast"},
		{get("optimizer", "state", int64(0), "exp_avg"), statedict.Float32, "tpu", "moment stays float32"},
		{get("optimizer", "state", int64(0), "step"), statedict.Float32, "cpu", "step stays on cpu"},
	}
	for _, c := range checks {
		if c.t.DType != c.dtype || c.t.Storage.Location != c.loc {
			t.Errorf("%s: got %s on %s", c.what, c.t.DType, c.t.Storage.Location)
		}
	}
	if get("model", "w").Storage != get("model", "lm_head").Storage {
		t.Error("tied tensors no longer share a storage")
	}
	if rep.Cast != 2 || rep.Locations["cuda:0"] != "tpu" {
		t.Errorf("report %+v", rep)
	}
	if w.DType != statedict.Float32 || w.Storage.Location != "cuda:0" {
		t.Error("the source tree was modified")
	}
}

// TestFloat32ToBF16Kernel checks the float32 → bfloat16 kernels (the vector one where the CPU
// has it, and the portable one) against the scalar rounding (checked against torch in package
// quant) for every sign, exponent and top mantissa bits combined with the low halves that
// decide rounding and NaN-ness, at every alignment of the vector blocks and with tails.
func TestFloat32ToBF16Kernel(t *testing.T) {
	lows := []uint32{0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000}
	src := make([]byte, 0, 65536*len(lows)*4)
	var want []uint16
	for hi := uint32(0); hi < 65536; hi++ {
		for _, lo := range lows {
			u := hi<<16 | lo
			src = binary.LittleEndian.AppendUint32(src, u)
			want = append(want, quant.Float32ToBF16(math.Float32frombits(u)))
		}
	}
	for name, kernel := range map[string]func(dst, src []byte){"float32ToBF16": float32ToBF16, "float32ToBF16Go": float32ToBF16Go} {
		for _, start := range []int{0, 1, 7, 15} {
			for _, n := range []int{len(want) - start, len(want) - start - 1, 17, 16, 1, 0} {
				dst := make([]byte, 2*n)
				kernel(dst, src[4*start:4*(start+n)])
				for i := range n {
					if got := binary.LittleEndian.Uint16(dst[2*i:]); got != want[start+i] {
						t.Fatalf("%s, start %d, n %d: element %d (%08x): got %04x, want %04x",
							name, start, n, i, binary.LittleEndian.Uint32(src[4*(start+i):]), got, want[start+i])
					}
				}
			}
		}
	}
}

// BenchmarkCast measures --dtype casts of a mapped storage of 64 Mi elements, read in the
// 1 MiB pieces a writer asks for, on every core. Target: never holding up the disk, which
// writes 2-3 GB/s here: at least 1 Gelem/s for every cast, and float32 → bfloat16 (the
// common case, vectorized) as fast as torch's own kernel on the same cores (several Gelem/s).
func BenchmarkCast(b *testing.B) {
	const n = 64 << 20
	for _, c := range []struct{ from, to statedict.DType }{
		{statedict.Float32, statedict.BFloat16}, {statedict.BFloat16, statedict.Float32},
		{statedict.Float32, statedict.Float16}, {statedict.Float16, statedict.Float32},
		{statedict.BFloat16, statedict.Float16},
	} {
		b.Run(c.from.String()+"-"+c.to.String(), func(b *testing.B) {
			fs := c.from.Size()
			src := make([]byte, fs*n)
			for i := range n {
				v := float32(i) * 1.0001
				switch fs {
				case 4:
					binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(v))
				case 2:
					binary.LittleEndian.PutUint16(src[2*i:], quant.Float32ToBF16(v/65536))
				}
			}
			st := statedict.NewMappedStorage("0", "cpu", c.from, src)
			cast, err := castStorage(st, c.from, c.to)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				for off := int64(0); off < cast.Size; off += int64(len(buf)) {
					if _, err := cast.ReadAt(buf, off); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
