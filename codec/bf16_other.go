//go:build !amd64

package codec

// float32ToBF16 converts little-endian float32 elements to bfloat16.
func float32ToBF16(dst, src []byte) { float32ToBF16Go(dst, src) }
