package codec

import "golang.org/x/sys/cpu"

// float32ToBF16AVX2 converts whole 16-element blocks with AVX2; see bf16_amd64.s.
//
//go:noescape
func float32ToBF16AVX2(dst, src []byte) int

// float32ToBF16 converts little-endian float32 elements to bfloat16: 16 at a time with
// AVX2 where the CPU has it, the rest (and everything elsewhere) one at a time.
func float32ToBF16(dst, src []byte) {
	done := 0
	if cpu.X86.HasAVX2 {
		done = float32ToBF16AVX2(dst, src)
	}
	float32ToBF16Go(dst[2*done:], src[4*done:])
}
