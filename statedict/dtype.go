package statedict

import "fmt"

// DType is a torch element type. The zero value is Invalid. Every dtype torch 2.14 defines is
// listed, including the ones ckpt only carries through (quantized, bits, sub-byte integers), so
// a reader never has to fail on an unfamiliar but legal checkpoint.
type DType uint8

// The torch dtypes, named as torch names them (torch.float8_e4m3fn → Float8E4M3FN).
const (
	Invalid DType = iota
	Bool
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	Float16
	BFloat16
	Float32
	Float64
	Complex32
	Complex64
	Complex128
	BComplex32
	Float8E4M3FN
	Float8E5M2
	Float8E4M3FNUZ
	Float8E5M2FNUZ
	Float8E8M0FNU
	Float4E2M1FNx2
	QInt8
	QUInt8
	QInt32
	QUInt4x2
	QUInt2x4
	Bits8
	Bits16
	Bits1x8
	Bits2x4
	Bits4x2
	Uint1
	Uint2
	Uint3
	Uint4
	Uint5
	Uint6
	Uint7
	Int1
	Int2
	Int3
	Int4
	Int5
	Int6
	Int7
	numDTypes
)

// Kind groups dtypes by how their bits are interpreted.
type Kind uint8

// Kinds of dtype.
const (
	KindInvalid   Kind = iota
	KindBool           // one byte, 0 or 1
	KindUnsigned       // unsigned integer
	KindSigned         // two's complement integer
	KindFloat          // IEEE-style binary floating point (including fp8, fp4, e8m0)
	KindComplex        // a pair of floats (real, imaginary)
	KindQuantized      // torch quantized integer with a quantizer (scale, zero point)
	KindBits           // opaque bit containers (torch.bits*)
)

type dtypeInfo struct {
	name string // torch name without "torch."
	// size is the element size in bytes as torch counts elements: for float4_e2m1fn_x2 one
	// element is a byte holding two fp4 values; for quint4x2/quint2x4 it is the storage byte.
	size int
	kind Kind
	// storage is the typed storage class torch.save writes in the persistent id
	// ("FloatStorage"); empty for dtypes saved through torch.storage.UntypedStorage
	// and _rebuild_tensor_v3.
	storage string
	// safetensors is the dtype string of the safetensors format, empty if it has none.
	safetensors string
	// savable is false for dtypes torch.save cannot write as tensors (uint1..7, int1..7).
	savable bool
}

var dtypes = [numDTypes]dtypeInfo{
	Bool:           {"bool", 1, KindBool, "BoolStorage", "BOOL", true},
	Uint8:          {"uint8", 1, KindUnsigned, "ByteStorage", "U8", true},
	Uint16:         {"uint16", 2, KindUnsigned, "", "U16", true},
	Uint32:         {"uint32", 4, KindUnsigned, "", "U32", true},
	Uint64:         {"uint64", 8, KindUnsigned, "", "U64", true},
	Int8:           {"int8", 1, KindSigned, "CharStorage", "I8", true},
	Int16:          {"int16", 2, KindSigned, "ShortStorage", "I16", true},
	Int32:          {"int32", 4, KindSigned, "IntStorage", "I32", true},
	Int64:          {"int64", 8, KindSigned, "LongStorage", "I64", true},
	Float16:        {"float16", 2, KindFloat, "HalfStorage", "F16", true},
	BFloat16:       {"bfloat16", 2, KindFloat, "BFloat16Storage", "BF16", true},
	Float32:        {"float32", 4, KindFloat, "FloatStorage", "F32", true},
	Float64:        {"float64", 8, KindFloat, "DoubleStorage", "F64", true},
	Complex32:      {"complex32", 4, KindComplex, "", "", true},
	Complex64:      {"complex64", 8, KindComplex, "ComplexFloatStorage", "C64", true},
	Complex128:     {"complex128", 16, KindComplex, "ComplexDoubleStorage", "", true},
	BComplex32:     {"bcomplex32", 4, KindComplex, "", "", true},
	Float8E4M3FN:   {"float8_e4m3fn", 1, KindFloat, "", "F8_E4M3", true},
	Float8E5M2:     {"float8_e5m2", 1, KindFloat, "", "F8_E5M2", true},
	Float8E4M3FNUZ: {"float8_e4m3fnuz", 1, KindFloat, "", "F8_E4M3FNUZ", true},
	Float8E5M2FNUZ: {"float8_e5m2fnuz", 1, KindFloat, "", "F8_E5M2FNUZ", true},
	Float8E8M0FNU:  {"float8_e8m0fnu", 1, KindFloat, "", "F8_E8M0", true},
	Float4E2M1FNx2: {"float4_e2m1fn_x2", 1, KindFloat, "", "F4", true},
	QInt8:          {"qint8", 1, KindQuantized, "QInt8Storage", "", true},
	QUInt8:         {"quint8", 1, KindQuantized, "QUInt8Storage", "", true},
	QInt32:         {"qint32", 4, KindQuantized, "QInt32Storage", "", true},
	QUInt4x2:       {"quint4x2", 1, KindQuantized, "QUInt4x2Storage", "", true},
	QUInt2x4:       {"quint2x4", 1, KindQuantized, "QUInt2x4Storage", "", true},
	Bits8:          {"bits8", 1, KindBits, "", "", true},
	Bits16:         {"bits16", 2, KindBits, "", "", true},
	Bits1x8:        {"bits1x8", 1, KindBits, "", "", true},
	Bits2x4:        {"bits2x4", 1, KindBits, "", "", true},
	Bits4x2:        {"bits4x2", 1, KindBits, "", "", true},
	Uint1:          {"uint1", 1, KindUnsigned, "", "", false},
	Uint2:          {"uint2", 1, KindUnsigned, "", "", false},
	Uint3:          {"uint3", 1, KindUnsigned, "", "", false},
	Uint4:          {"uint4", 1, KindUnsigned, "", "", false},
	Uint5:          {"uint5", 1, KindUnsigned, "", "", false},
	Uint6:          {"uint6", 1, KindUnsigned, "", "", false},
	Uint7:          {"uint7", 1, KindUnsigned, "", "", false},
	Int1:           {"int1", 1, KindSigned, "", "", false},
	Int2:           {"int2", 1, KindSigned, "", "", false},
	Int3:           {"int3", 1, KindSigned, "", "", false},
	Int4:           {"int4", 1, KindSigned, "", "", false},
	Int5:           {"int5", 1, KindSigned, "", "", false},
	Int6:           {"int6", 1, KindSigned, "", "", false},
	Int7:           {"int7", 1, KindSigned, "", "", false},
}

var (
	byName       = map[string]DType{}
	byStorage    = map[string]DType{}
	bySafetensor = map[string]DType{}
)

func init() {
	for d := Bool; d < numDTypes; d++ {
		in := dtypes[d]
		byName[in.name] = d
		if in.storage != "" {
			byStorage[in.storage] = d
		}
		if in.safetensors != "" {
			bySafetensor[in.safetensors] = d
		}
	}
	// torch's aliases, as str(torch.half) etc. never print them but users type them.
	for alias, d := range map[string]DType{
		"half": Float16, "float": Float32, "double": Float64, "short": Int16, "int": Int32,
		"long": Int64, "chalf": Complex32, "cfloat": Complex64, "cdouble": Complex128,
	} {
		byName[alias] = d
	}
}

// DTypes returns every known dtype in a fixed order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Bool; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// ParseDType returns the dtype torch calls name, with or without the "torch." prefix and
// including torch's aliases ("half", "float", "long", ...).
func ParseDType(name string) (DType, bool) {
	if len(name) > 6 && name[:6] == "torch." {
		name = name[6:]
	}
	d, ok := byName[name]
	return d, ok
}

// DTypeForStorage maps a typed storage class name ("FloatStorage", as in the GLOBALs
// torch.FloatStorage or torch.cuda.FloatStorage) to the dtype of its elements.
func DTypeForStorage(class string) (DType, bool) {
	d, ok := byStorage[class]
	return d, ok
}

// DTypeForSafetensors maps a safetensors dtype string ("BF16", "F8_E4M3") to the torch dtype.
func DTypeForSafetensors(s string) (DType, bool) {
	d, ok := bySafetensor[s]
	return d, ok
}

func (d DType) info() dtypeInfo {
	if d >= numDTypes {
		return dtypeInfo{}
	}
	return dtypes[d]
}

// String returns torch's name for the dtype without the "torch." prefix ("bfloat16").
func (d DType) String() string {
	if n := d.info().name; n != "" {
		return n
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the size of one element in bytes, as torch's element_size() reports it.
func (d DType) Size() int { return d.info().size }

// ValuesPerByte is 2 for quint4x2 and 4 for quint2x4, whose tensors count packed values
// while their storages count bytes; 1 for every other dtype (float4_e2m1fn_x2 tensors count
// bytes, each holding two fp4 values).
func (d DType) ValuesPerByte() int64 {
	switch d {
	case QUInt4x2:
		return 2
	case QUInt2x4:
		return 4
	}
	return 1
}

// Kind tells how the element bits are interpreted.
func (d DType) Kind() Kind { return d.info().kind }

// IsFloatingPoint reports whether torch treats the dtype as floating point
// (torch.is_floating_point), which is what dtype casts such as --dtype bfloat16 apply to.
func (d DType) IsFloatingPoint() bool { return d.info().kind == KindFloat }

// IsComplex reports whether elements are (real, imaginary) pairs.
func (d DType) IsComplex() bool { return d.info().kind == KindComplex }

// StorageClass is the typed storage class torch.save names for this dtype ("FloatStorage"), or
// "" when torch saves it as torch.storage.UntypedStorage with _rebuild_tensor_v3.
func (d DType) StorageClass() string { return d.info().storage }

// Safetensors is the safetensors dtype string, or "" if the format has none for this dtype.
func (d DType) Safetensors() string { return d.info().safetensors }

// Savable reports whether torch.save can write tensors of this dtype.
func (d DType) Savable() bool { return d.info().savable }

// MarshalText encodes the dtype as torch's name, so JSON output uses "bfloat16".
func (d DType) MarshalText() ([]byte, error) {
	if d.info().name == "" {
		return nil, fmt.Errorf("statedict: invalid dtype %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses torch's name for a dtype.
func (d *DType) UnmarshalText(b []byte) error {
	v, ok := ParseDType(string(b))
	if !ok {
		return fmt.Errorf("statedict: unknown dtype %q", b)
	}
	*d = v
	return nil
}
