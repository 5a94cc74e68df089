package codec

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestFloat32ToBF16Kernel checks the float32 → bfloat16 kernels (the vector one where the CPU
// has it, and the portable one) against the scalar rounding (checked against torch in golden_test.go) for every sign, exponent and top mantissa bits combined with the low halves that
// decide rounding and NaN-ness, at every alignment of the vector blocks and with tails.
func TestFloat32ToBF16Kernel(t *testing.T) {
	lows := []uint32{0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000}
	src := make([]byte, 0, 65536*len(lows)*4)
	var want []uint16
	for hi := uint32(0); hi < 65536; hi++ {
		for _, lo := range lows {
			u := hi<<16 | lo
			src = binary.LittleEndian.AppendUint32(src, u)
			want = append(want, Float32ToBF16(math.Float32frombits(u)))
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
					binary.LittleEndian.PutUint16(src[2*i:], Float32ToBF16(v/65536))
				}
			}
			st := statedict.NewMappedStorage("0", "cpu", c.from, src)
			cast, err := CastStorage(st, c.from, c.to)
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
