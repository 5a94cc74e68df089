#include "textflag.h"

// func float32ToBF16AVX2(dst, src []byte) int
// Converts floor(len(src)/64)*16 little-endian float32 elements of src to bfloat16 in dst,
// rounding to nearest even and turning every NaN into 0xFFFF, as quant.Float32ToBF16 and
// torch's vectorized x86 cast do. Returns the number of elements converted. dst must hold
// half as many bytes as are converted.
TEXT ·float32ToBF16AVX2(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $6, CX              // 64-byte (16-element) blocks
	MOVQ CX, AX
	SHLQ $4, AX              // elements converted
	MOVQ AX, ret+48(FP)
	TESTQ CX, CX
	JZ   done

	MOVL $1, DX
	VMOVD DX, X15
	VPBROADCASTD X15, Y15    // 1
	MOVL $0x7FFF, DX
	VMOVD DX, X14
	VPBROADCASTD X14, Y14    // 0x7FFF
	MOVL $0x7FFFFFFF, DX
	VMOVD DX, X13
	VPBROADCASTD X13, Y13    // abs mask
	MOVL $0x7F800000, DX
	VMOVD DX, X12
	VPBROADCASTD X12, Y12    // +inf

loop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1

	VPSRLD   $16, Y0, Y2     // lsb of the kept half
	VPAND    Y15, Y2, Y2
	VPADDD   Y14, Y0, Y3
	VPADDD   Y2, Y3, Y3
	VPSRLD   $16, Y3, Y3     // rounded, ≤ 0xFFFF for every non-NaN
	VPAND    Y13, Y0, Y4
	VPCMPGTD Y12, Y4, Y4     // NaN: |u| > +inf
	VPSRLD   $16, Y4, Y4     // 0xFFFF in NaN lanes
	VPOR     Y4, Y3, Y3

	VPSRLD   $16, Y1, Y5
	VPAND    Y15, Y5, Y5
	VPADDD   Y14, Y1, Y6
	VPADDD   Y5, Y6, Y6
	VPSRLD   $16, Y6, Y6
	VPAND    Y13, Y1, Y7
	VPCMPGTD Y12, Y7, Y7
	VPSRLD   $16, Y7, Y7
	VPOR     Y7, Y6, Y6

	VPACKUSDW Y6, Y3, Y8     // per 128-bit lane: 4 of Y3, 4 of Y6
	VPERMQ    $0xD8, Y8, Y8  // back in element order
	VMOVDQU   Y8, (DI)

	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET
