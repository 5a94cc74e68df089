package codec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// benchN elements per kernel call: 1 Mi, large enough to stream through the
// caches like a chunk of a multi-GB tensor.
const benchN = 1 << 20

// reportGelem reports throughput in 10^9 elements per second.
func reportGelem(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}

func benchBytes() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, benchN)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	return src
}

// benchFloats returns values a dequantizer produces: fp8 values times a scale.
func benchFloats() []float32 {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, benchN)
	for i := range src {
		src[i] = float32(r.NormFloat64()) * 0.02
	}
	return src
}

func BenchmarkDecodeFP8(b *testing.B) {
	src, dst := benchBytes(), make([]float32, benchN)
	b.SetBytes(benchN)
	for b.Loop() {
		DecodeFP8(dst, src, E4M3FN)
	}
	reportGelem(b, benchN)
}

func BenchmarkDecodeFP8ToBF16(b *testing.B) {
	src, dst := benchBytes(), make([]byte, 2*benchN)
	b.SetBytes(benchN)
	for b.Loop() {
		DecodeFP8ToBF16(dst, src, E4M3FN)
	}
	reportGelem(b, benchN)
}

// BenchmarkDequantFP8ToBF16 is the block-FP8 recipe's inner loop (quant.md R1):
// decode, one float32 multiply by the block scale, round to bfloat16, done in
// cache-sized chunks through the two kernels.
func BenchmarkDequantFP8ToBF16(b *testing.B) {
	const chunk = 4096
	src, dst := benchBytes(), make([]byte, 2*benchN)
	tmp := make([]float32, chunk)
	scale := float32(math.Float32frombits(0x3B60CCCD))
	b.SetBytes(benchN)
	for b.Loop() {
		for off := 0; off < benchN; off += chunk {
			DecodeFP8(tmp, src[off:off+chunk], E4M3FN)
			for i := range tmp {
				tmp[i] *= scale
			}
			EncodeBF16(dst[2*off:2*(off+chunk)], tmp)
		}
	}
	reportGelem(b, benchN)
}

func BenchmarkDecodeFP4x2(b *testing.B) {
	src, dst := benchBytes(), make([]float32, 2*benchN)
	b.SetBytes(benchN)
	for b.Loop() {
		DecodeFP4x2(dst, src)
	}
	reportGelem(b, 2*benchN)
}

func BenchmarkEncodeBF16(b *testing.B) {
	src, dst := benchFloats(), make([]byte, 2*benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		EncodeBF16(dst, src)
	}
	reportGelem(b, benchN)
}

func BenchmarkDecodeBF16(b *testing.B) {
	src, dst := make([]byte, 2*benchN), make([]float32, benchN)
	EncodeBF16(src, benchFloats())
	b.SetBytes(2 * benchN)
	for b.Loop() {
		DecodeBF16(dst, src)
	}
	reportGelem(b, benchN)
}

func BenchmarkEncodeF16(b *testing.B) {
	src, dst := benchFloats(), make([]byte, 2*benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		EncodeF16(dst, src)
	}
	reportGelem(b, benchN)
}

func BenchmarkDecodeF16(b *testing.B) {
	src, dst := make([]byte, 2*benchN), make([]float32, benchN)
	EncodeF16(src, benchFloats())
	b.SetBytes(2 * benchN)
	for b.Loop() {
		DecodeF16(dst, src)
	}
	reportGelem(b, benchN)
}

func BenchmarkEncodeFP8(b *testing.B) {
	src := benchFloats()
	for i := range src {
		src[i] *= 1000
	}
	dst := make([]byte, benchN)
	for _, f := range formats {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(4 * benchN)
			for b.Loop() {
				EncodeFP8(dst, src, f)
			}
			reportGelem(b, benchN)
		})
	}
}

func BenchmarkDecodeF64(b *testing.B) {
	src, dst := make([]byte, 8*benchN), make([]float32, benchN)
	b.SetBytes(8 * benchN)
	for b.Loop() {
		DecodeF64(dst, src)
	}
	reportGelem(b, benchN)
}
