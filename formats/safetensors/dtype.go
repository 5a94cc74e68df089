package safetensors

// dtypeNames lists the dtype strings of safetensors 0.8 in the order of the Rust `Dtype` enum,
// which the reference writer uses as "alignment" order: SortLikeReference sorts by descending
// position in this list.
var dtypeNames = [...]string{
	"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
	"F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
	"F64", "I64", "U64",
}

// dtypeBits is the element width in bits of each entry of dtypeNames (Rust `Dtype::bitsize`).
var dtypeBits = [len(dtypeNames)]uint64{
	8, 4, 6, 6, 8, 8, 8, 8, 8,
	8, 8, 16, 16, 16, 16, 32, 32, 32, 64,
	64, 64, 64,
}

// dtypeRank returns the position of a dtype string in the reference enum, or -1 if safetensors
// 0.8 does not define it.
func dtypeRank(s string) int {
	for i, n := range dtypeNames {
		if n == s {
			return i
		}
	}
	return -1
}

// DTypeBits returns the width in bits of one element of the safetensors dtype s ("BF16" → 16,
// "F4" → 4, "F6_E2M3" → 6), and false if s is not one of the 22 dtypes of safetensors 0.8.
// Sizes are in bits because F4 and F6 elements are smaller than a byte.
func DTypeBits(s string) (int, bool) {
	r := dtypeRank(s)
	if r < 0 {
		return 0, false
	}
	return int(dtypeBits[r]), true
}

// wellFormedDType reports whether s looks like a safetensors dtype string: 1 to 32 characters
// of A-Z, 0-9 and '_', starting with a letter. Unknown dtypes of this shape are listed rather
// than rejected, so files from newer writers can still be inspected.
func wellFormedDType(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
