package kernel

import "golang.org/x/sys/cpu"

// archImpls lists the assembly kernels this CPU can run, best first.
func archImpls() []*Impl {
	var out []*Impl
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX {
		im := &Impl{Name: "avx512", MR: 4, NR: 4, Step: 16, bf16: avx512BF16, f32: avx512F32}
		if cpu.X86.HasAVX512BF16 {
			im.dp, im.dpStep = avx512bf16DP, 32
		}
		out = append(out, im)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, &Impl{Name: "avx2", MR: 4, NR: 3, Step: 8, bf16: avx2BF16, f32: avx2F32})
	}
	return out
}
