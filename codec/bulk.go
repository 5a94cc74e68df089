package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The slice kernels below convert whole buffers. Stored elements are
// little-endian bytes (as in safetensors and torch.save storages), wide elements
// are Go values. Each kernel converts exactly the elements of src: it panics when
// src is not a whole number of elements or dst does not hold exactly as many
// elements, which catches shape bugs instead of leaving stale data. They never
// allocate; callers process multi-GB tensors in chunks of their choosing.

// sizes panics unless src holds a whole number of width-byte elements and dst
// exactly n elements of its own; it returns the element count.
func sizes(kernel string, dstLen, dstPer, srcLen, srcWidth int) int {
	n := srcLen / srcWidth
	if srcLen%srcWidth != 0 || dstLen != n*dstPer {
		panic(fmt.Sprintf("codec.%s: len(src) = %d bytes (%d per element), len(dst) = %d, want %d",
			kernel, srcLen, srcWidth, dstLen, n*dstPer))
	}
	return n
}

// DecodeFP8 widens every code of src (format f) to float32, exactly as
// [Format.Decode]: one table lookup per element. len(dst) must equal len(src).
func DecodeFP8(dst []float32, src []byte, f Format) {
	sizes("DecodeFP8", len(dst), 1, len(src), 1)
	lut := &fp8ToF32[f]
	for len(src) >= 8 && len(dst) >= 8 {
		v := binary.LittleEndian.Uint64(src)
		dst[0], dst[1], dst[2], dst[3] = lut[byte(v)], lut[byte(v>>8)], lut[byte(v>>16)], lut[byte(v>>24)]
		dst[4], dst[5], dst[6], dst[7] = lut[byte(v>>32)], lut[byte(v>>40)], lut[byte(v>>48)], lut[byte(v>>56)]
		src, dst = src[8:], dst[8:]
	}
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = lut[b]
	}
}

// DecodeFP8ToBF16 writes the bfloat16 (little-endian) of every code of src
// (format f), as torch's u8.view(dtype).to(torch.bfloat16) does: every finite
// value and ±inf is exact in bfloat16, NaN gives 0x7FC0 (torch's scalar
// conversion, not [BF16NaN]). len(dst) must be 2·len(src).
func DecodeFP8ToBF16(dst []byte, src []byte, f Format) {
	sizes("DecodeFP8ToBF16", len(dst), 2, len(src), 1)
	lut := &fp8ToBF16[f]
	for len(src) >= 4 && len(dst) >= 8 {
		v := binary.LittleEndian.Uint32(src)
		binary.LittleEndian.PutUint64(dst, uint64(lut[byte(v)])|uint64(lut[byte(v>>8)])<<16|
			uint64(lut[byte(v>>16)])<<32|uint64(lut[byte(v>>24)])<<48)
		src, dst = src[4:], dst[8:]
	}
	for i, b := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], lut[b])
	}
}

// EncodeFP8 rounds every element of src to format f as [Format.Encode] does (that
// is, as torch's cast). len(dst) must equal len(src).
func EncodeFP8(dst []byte, src []float32, f Format) {
	sizes("EncodeFP8", len(dst), 1, len(src), 1)
	dst = dst[:len(src)]
	if f == E8M0FNU {
		for i, x := range src {
			dst[i] = encodeE8M0(math.Float32bits(x))
		}
		return
	}
	l := &layouts[f]
	for i, x := range src {
		dst[i] = l.encode(math.Float32bits(x))
	}
}

// DecodeFP4x2 unpacks torch float4_e2m1fn_x2 bytes into float32, two elements per
// byte in the order of [FP4x2ToFloat32] (low nibble first). len(dst) must be
// 2·len(src).
func DecodeFP4x2(dst []float32, src []byte) {
	sizes("DecodeFP4x2", len(dst), 2, len(src), 1)
	lut := &fp4x2ToF32
	for len(src) >= 4 && len(dst) >= 8 {
		v := binary.LittleEndian.Uint32(src)
		a, b, c, d := &lut[byte(v)], &lut[byte(v>>8)], &lut[byte(v>>16)], &lut[byte(v>>24)]
		dst[0], dst[1], dst[2], dst[3] = a[0], a[1], b[0], b[1]
		dst[4], dst[5], dst[6], dst[7] = c[0], c[1], d[0], d[1]
		src, dst = src[4:], dst[8:]
	}
	for i, b := range src {
		p := &lut[b]
		dst[2*i], dst[2*i+1] = p[0], p[1]
	}
}

// DecodeBF16 widens little-endian bfloat16 elements to float32 ([BF16ToFloat32]).
// len(src) must be 2·len(dst).
func DecodeBF16(dst []float32, src []byte) {
	sizes("DecodeBF16", len(dst), 1, len(src), 2)
	for len(src) >= 8 && len(dst) >= 4 {
		v := binary.LittleEndian.Uint64(src)
		dst[0] = math.Float32frombits(uint32(v) << 16)
		dst[1] = math.Float32frombits(uint32(v) & 0xFFFF0000)
		dst[2] = math.Float32frombits(uint32(v>>32) << 16)
		dst[3] = math.Float32frombits(uint32(v>>32) & 0xFFFF0000)
		src, dst = src[8:], dst[4:]
	}
	for i := range dst {
		dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// EncodeBF16 rounds float32 elements to little-endian bfloat16 as torch's
// vectorized CPU cast does ([Float32ToBF16]: RNE, NaN → [BF16NaN]). len(dst) must
// be 2·len(src).
func EncodeBF16(dst []byte, src []float32) {
	sizes("EncodeBF16", len(dst), 2, len(src), 1)
	for len(src) >= 4 && len(dst) >= 8 {
		binary.LittleEndian.PutUint64(dst, uint64(Float32ToBF16(src[0]))|uint64(Float32ToBF16(src[1]))<<16|
			uint64(Float32ToBF16(src[2]))<<32|uint64(Float32ToBF16(src[3]))<<48)
		src, dst = src[4:], dst[8:]
	}
	for i, x := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], Float32ToBF16(x))
	}
}

// DecodeF16 widens little-endian IEEE binary16 elements to float32
// ([F16ToFloat32]). len(src) must be 2·len(dst).
func DecodeF16(dst []float32, src []byte) {
	n := sizes("DecodeF16", len(dst), 1, len(src), 2)
	dst = dst[:n]
	for i := range dst {
		// The normal case is spelled out here: F16ToFloat32 is too big to inline.
		if h := binary.LittleEndian.Uint16(src[2*i:]); f16IsNormal(h) {
			dst[i] = f16NormalToFloat32(h)
		} else {
			dst[i] = f16Special(h)
		}
	}
}

// EncodeF16 rounds float32 elements to little-endian IEEE binary16 as torch's CPU
// cast does ([Float32ToF16]). len(dst) must be 2·len(src).
func EncodeF16(dst []byte, src []float32) {
	sizes("EncodeF16", len(dst), 2, len(src), 1)
	for i, x := range src {
		// The normal case is spelled out here: Float32ToF16 is too big to inline.
		u, h := math.Float32bits(x), uint16(0)
		if f16NormalResult(u) {
			h = f16Normal(u)
		} else {
			h = f16Rare(u)
		}
		binary.LittleEndian.PutUint16(dst[2*i:], h)
	}
}

// DecodeF64 narrows little-endian float64 elements to float32, rounding to nearest
// even (overflow to ±inf, NaN payloads truncated with the quiet bit set), which
// is what torch's float64 → float32 cast gives. len(src) must be 8·len(dst).
func DecodeF64(dst []float32, src []byte) {
	sizes("DecodeF64", len(dst), 1, len(src), 8)
	for len(src) >= 32 && len(dst) >= 4 {
		dst[0] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src)))
		dst[1] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8:])))
		dst[2] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[16:])))
		dst[3] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[24:])))
		src, dst = src[32:], dst[4:]
	}
	for i := range dst {
		dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
	}
}
