package codec

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// The golden tables in testdata/quant are written by torch 2.14.1 (gen.py); see
// testdata/quant/README.md for their layout.
const goldenDir = "../testdata/quant"

var formats = []Format{E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ, E8M0FNU}

func readGolden(t *testing.T, dir, name string, width int) []uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%width != 0 {
		t.Fatalf("%s: %d bytes is not a multiple of %d", name, len(b), width)
	}
	out := make([]uint64, len(b)/width)
	for i := range out {
		switch width {
		case 1:
			out[i] = uint64(b[i])
		case 2:
			out[i] = uint64(binary.LittleEndian.Uint16(b[2*i:]))
		case 4:
			out[i] = uint64(binary.LittleEndian.Uint32(b[4*i:]))
		case 8:
			out[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	}
	return out
}

// compare reports every index where got and want differ (the first 10 in full).
func compare(t *testing.T, what string, got, want []uint64, input func(i int) string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, torch has %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad < 10 {
				t.Errorf("%s(%s) = %#x, torch %#x", what, input(i), got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d differ from torch", what, bad, len(want))
	}
}

func byteInput(i int) string { return fmt.Sprintf("%#02x", i) }

func TestDecodeFP8MatchesTorch(t *testing.T) {
	for _, f := range formats {
		t.Run(f.String(), func(t *testing.T) {
			want := readGolden(t, goldenDir, f.String()+".decode", 4)
			src := make([]byte, 256)
			scalar := make([]uint64, 256)
			for i := range src {
				src[i] = byte(i)
				scalar[i] = uint64(math.Float32bits(f.Decode(byte(i))))
			}
			compare(t, "Decode", scalar, want, byteInput)
			dst := make([]float32, 256)
			DecodeFP8(dst, src, f)
			compare(t, "DecodeFP8", f32Bits(dst), want, byteInput)

			wantBF16 := readGolden(t, goldenDir, f.String()+".bfloat16", 2)
			out := make([]byte, 512)
			DecodeFP8ToBF16(out, src, f)
			compare(t, "DecodeFP8ToBF16", u16s(out), wantBF16, byteInput)
			// Odd lengths take the tail loop.
			DecodeFP8ToBF16(out[:2*255], src[1:], f)
			compare(t, "DecodeFP8ToBF16 tail", u16s(out[:2*255]), wantBF16[1:], func(i int) string { return byteInput(i + 1) })
		})
	}
}

func TestDecodeFP4MatchesTorch(t *testing.T) {
	want := readGolden(t, goldenDir, "float4_e2m1fn_x2.decode", 4)
	src := make([]byte, 256)
	scalar := make([]uint64, 0, 512)
	for i := range src {
		src[i] = byte(i)
		a, b := FP4x2ToFloat32(byte(i))
		scalar = append(scalar, uint64(math.Float32bits(a)), uint64(math.Float32bits(b)))
	}
	input := func(i int) string { return fmt.Sprintf("byte %#02x element %d", i/2, i%2) }
	compare(t, "FP4x2ToFloat32", scalar, want, input)
	dst := make([]float32, 512)
	DecodeFP4x2(dst, src)
	compare(t, "DecodeFP4x2", f32Bits(dst), want, input)
	for i := range src {
		if FP4ToFloat32(byte(i)) != dst[2*(i&0xF)] {
			t.Errorf("FP4ToFloat32(%#02x) = %v, want %v", i, FP4ToFloat32(byte(i)), dst[2*(i&0xF)])
		}
	}
}

func TestDecodeHalfMatchesTorch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scalar func(uint16) float32
		bulk   func([]float32, []byte)
	}{
		{"bfloat16", BF16ToFloat32, DecodeBF16},
		{"float16", F16ToFloat32, DecodeF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := readGolden(t, goldenDir, tc.name+".decode", 4)
			src := make([]byte, 2<<16)
			scalar := make([]uint64, 1<<16)
			for i := range scalar {
				binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
				scalar[i] = uint64(math.Float32bits(tc.scalar(uint16(i))))
			}
			input := func(i int) string { return fmt.Sprintf("%#04x", i) }
			compare(t, "scalar", scalar, want, input)
			dst := make([]float32, 1<<16)
			tc.bulk(dst, src)
			compare(t, "bulk", f32Bits(dst), want, input)
		})
	}
}

// encoder is one float32 → stored-format conversion, scalar and bulk.
type encoder struct {
	name   string // torch dtype name, also the golden file suffix
	width  int    // bytes per stored element
	scalar func(float32) uint64
	bulk   func(dst []byte, src []float32)
}

func encoders() []encoder {
	list := []encoder{
		{"bfloat16", 2, func(x float32) uint64 { return uint64(Float32ToBF16(x)) }, EncodeBF16},
		{"float16", 2, func(x float32) uint64 { return uint64(Float32ToF16(x)) }, EncodeF16},
	}
	for _, f := range formats {
		list = append(list, encoder{f.String(), 1,
			func(x float32) uint64 { return uint64(f.Encode(x)) },
			func(dst []byte, src []float32) { EncodeFP8(dst, src, f) }})
	}
	return list
}

func TestEncodeMatchesTorch(t *testing.T) {
	inputs := readGolden(t, goldenDir, "encode.inputs", 4)
	src := make([]float32, len(inputs))
	for i, b := range inputs {
		src[i] = math.Float32frombits(uint32(b))
	}
	input := func(i int) string { return fmt.Sprintf("%#08x", inputs[i]) }
	for _, e := range encoders() {
		t.Run(e.name, func(t *testing.T) {
			want := readGolden(t, goldenDir, "encode."+e.name, e.width)
			scalar := make([]uint64, len(src))
			for i, x := range src {
				scalar[i] = e.scalar(x)
			}
			compare(t, "scalar", scalar, want, input)
			dst := make([]byte, e.width*len(src))
			e.bulk(dst, src)
			got := make([]uint64, len(src))
			for i := range got {
				if e.width == 2 {
					got[i] = uint64(binary.LittleEndian.Uint16(dst[2*i:]))
				} else {
					got[i] = uint64(dst[i])
				}
			}
			compare(t, "bulk", got, want, input)
		})
	}
}

func TestDecodeF64MatchesTorch(t *testing.T) {
	inputs := readGolden(t, goldenDir, "float64.inputs", 8)
	want := readGolden(t, goldenDir, "float64.float32", 4)
	src := make([]byte, 8*len(inputs))
	for i, b := range inputs {
		binary.LittleEndian.PutUint64(src[8*i:], b)
	}
	dst := make([]float32, len(inputs))
	DecodeF64(dst, src)
	compare(t, "DecodeF64", f32Bits(dst), want, func(i int) string { return fmt.Sprintf("%#016x", inputs[i]) })
}

// exhaustive is exhaustive.json: for each encoder, the CRC-32 (IEEE) of torch's
// output bytes for all float32 bit patterns, one CRC per 2^ChunkBits consecutive
// patterns.
type exhaustive struct {
	Torch         string              `json:"torch"`
	CPUCapability string              `json:"cpu_capability"`
	ChunkBits     uint                `json:"chunk_bits"`
	CRC32         map[string][]string `json:"crc32"`
}

// TestEncodeAllFloat32MatchesTorch checks every encoder on all 2^32 float32 inputs
// against torch's per-chunk CRCs (about 10 s of CPU per encoder; skipped with
// -short).
func TestEncodeAllFloat32MatchesTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps all 2^32 float32 inputs per encoder; skipped with -short")
	}
	raw, err := os.ReadFile(filepath.Join(goldenDir, "exhaustive.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex exhaustive
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatal(err)
	}
	chunks := 1 << (32 - ex.ChunkBits)
	for _, e := range encoders() {
		t.Run(e.name, func(t *testing.T) {
			want := ex.CRC32[e.name]
			if len(want) != chunks {
				t.Fatalf("exhaustive.json has %d CRCs for %s, want %d", len(want), e.name, chunks)
			}
			next := make(chan int)
			go func() {
				for k := range chunks {
					next <- k
				}
				close(next)
			}()
			var wg sync.WaitGroup
			for range runtime.GOMAXPROCS(0) {
				wg.Go(func() {
					src := make([]float32, 1<<ex.ChunkBits)
					dst := make([]byte, e.width<<ex.ChunkBits)
					for k := range next {
						base := uint32(k) << ex.ChunkBits
						for i := range src {
							src[i] = math.Float32frombits(base + uint32(i))
						}
						e.bulk(dst, src)
						if got := fmt.Sprintf("%08x", crc32.ChecksumIEEE(dst)); got != want[k] {
							t.Errorf("float32 inputs %#08x..%#08x: CRC %s, torch %s", base, base+uint32(len(src)-1), got, want[k])
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func f32Bits(v []float32) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(math.Float32bits(x))
	}
	return out
}

func u16s(b []byte) []uint64 {
	out := make([]uint64, len(b)/2)
	for i := range out {
		out[i] = uint64(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}
