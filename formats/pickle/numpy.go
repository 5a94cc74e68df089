package pickle

import (
	"fmt"
	"math/bits"
	"strconv"
)

// numpy arrays, dtypes and scalars, decoded as data from the calls numpy's
// __reduce__ methods emit:
//
//	numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b') + BUILD (1, shape, dtype, is_fortran, rawdata)
//	numpy.dtype('f8', False, True) + BUILD (3, '<', None, None, None, -1, -1, 0)
//	numpy.core.multiarray.scalar(dtype, rawdata)
//	numpy.core.numeric._frombuffer(buffer, dtype, shape, order)   (protocol 5)
//
// numpy 2 spells the modules numpy._core.*; both are accepted.

// String returns numpy's dtype.str: byte order, kind and item size, e.g.
// "<f8", "|b1", "<U5"; "|O" for objects; datetimes carry their unit
// ("<M8[ns]"). Before BUILD the byte order shows as '='.
func (t *NPDType) String() string {
	if t.Name == "" {
		return ""
	}
	if t.Name[0] == 'O' {
		return "|O"
	}
	endian := "="
	if t.Endian != 0 {
		endian = string(t.Endian)
	}
	s := endian + t.Name
	if k := t.Name[0]; k == 'M' || k == 'm' {
		if md, ok := t.Metadata.(Tuple); ok && len(md) == 2 {
			if unit, ok := md[1].(Tuple); ok && len(unit) >= 2 {
				var u string
				switch x := unit[0].(type) { // bytes as numpy writes it; str if re-pickled
				case []byte:
					u = string(x)
				case string:
					u = x
				}
				n, ok := unit[1].(int64)
				if ok && u != "" && u != "generic" {
					if n == 1 {
						s += "[" + u + "]"
					} else {
						s += "[" + strconv.FormatInt(n, 10) + u + "]"
					}
				}
			}
		}
	}
	return s
}

// ItemSize returns the size in bytes of one element, if known.
func (t *NPDType) ItemSize() (int64, bool) {
	if t.ElSize > 0 {
		return t.ElSize, true
	}
	if len(t.Name) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(t.Name[1:], 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, false
	}
	if t.Name[0] == 'U' {
		n *= 4
	}
	return n, true
}

func (t *NPDType) isObject() bool { return t.Name != "" && t.Name[0] == 'O' }

func (d *Decoder) numpyDType(args Tuple) (Value, bool, error) {
	if len(args) < 1 || len(args) > 3 {
		return nil, false, nil
	}
	name, ok := args[0].(string)
	if !ok || name == "" {
		return nil, false, nil
	}
	if err := d.charge(objectCost, "numpy dtype"); err != nil {
		return nil, false, err
	}
	return &NPDType{Name: name, ElSize: -1, Alignment: -1}, true, nil
}

// buildDType applies a dtype BUILD state, accepting the layouts numpy's
// arraydescr_setstate does (tuples of 5 to 9 items).
func buildDType(t *NPDType, state Value) error {
	st, ok := state.(Tuple)
	if !ok {
		return fmt.Errorf("numpy.dtype state is %s, not a tuple", typeName(state))
	}
	var endian Value
	ints := func(vs ...Value) ([]int64, error) {
		out := make([]int64, len(vs))
		for i, v := range vs {
			n, ok := asInt(v)
			if !ok {
				return nil, fmt.Errorf("numpy.dtype state item is %s, not an int", typeName(v))
			}
			out[i] = n
		}
		return out, nil
	}
	var err error
	var n []int64
	switch len(st) {
	case 9, 8:
		if n, err = ints(st[0], st[5], st[6], st[7]); err != nil {
			return err
		}
		t.Version, t.ElSize, t.Alignment, t.Flags = n[0], n[1], n[2], n[3]
		endian, t.Subarray, t.Names, t.Fields = st[1], st[2], st[3], st[4]
		if len(st) == 9 && !isNone(st[8]) {
			t.Metadata = st[8]
		}
	case 7:
		if n, err = ints(st[0], st[5], st[6]); err != nil {
			return err
		}
		t.Version, t.ElSize, t.Alignment = n[0], n[1], n[2]
		endian, t.Subarray, t.Names, t.Fields = st[1], st[2], st[3], st[4]
	case 6:
		if n, err = ints(st[0], st[4], st[5]); err != nil {
			return err
		}
		t.Version, t.ElSize, t.Alignment = n[0], n[1], n[2]
		endian, t.Subarray, t.Fields = st[1], st[2], st[3]
	case 5:
		if n, err = ints(st[3], st[4]); err != nil {
			return err
		}
		t.Version, t.ElSize, t.Alignment = 0, n[0], n[1]
		endian, t.Subarray, t.Fields = st[0], st[1], st[2]
	default:
		return fmt.Errorf("numpy.dtype state of %d items is not supported", len(st))
	}
	if t.Version < 0 || t.Version > 4 {
		return fmt.Errorf("can't handle version %d of numpy.dtype pickle", t.Version)
	}
	var e string
	switch x := endian.(type) {
	case string:
		e = x
	case []byte:
		e = string(x)
	}
	if len(e) != 1 || (e[0] != '<' && e[0] != '>' && e[0] != '|' && e[0] != '=') {
		return fmt.Errorf("numpy.dtype byte order is %s, not one of < > | =", typeName(endian))
	}
	t.Endian = e[0]
	for _, p := range []*Value{&t.Subarray, &t.Names, &t.Fields} {
		if isNone(*p) {
			*p = nil
		}
	}
	return nil
}

// asInt converts a Python int or bool to int64.
func asInt(v Value) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func (d *Decoder) numpyReconstruct(args Tuple) (Value, bool, error) {
	if len(args) != 3 || args[0] != (Global{"numpy", "ndarray"}) {
		return nil, false, nil
	}
	if err := d.charge(objectCost, "numpy array"); err != nil {
		return nil, false, err
	}
	return &NDArray{}, true, nil
}

// buildArray applies ndarray.__setstate__'s state (version, shape, dtype,
// is_fortran, rawdata), or the 4-item form without version.
func (d *Decoder) buildArray(a *NDArray, state Value) error {
	if a.built {
		return fmt.Errorf("BUILD on a numpy array that is already built")
	}
	st, ok := state.(Tuple)
	if !ok || (len(st) != 4 && len(st) != 5) {
		return fmt.Errorf("numpy array state is %s, not a 4- or 5-tuple", typeName(state))
	}
	if len(st) == 5 {
		st = st[1:]
	}
	fortran, ok := asInt(st[2])
	if !ok {
		return fmt.Errorf("numpy array is_fortran is %s", typeName(st[2]))
	}
	return d.fillArray(a, st[0], st[1], st[3], fortran != 0)
}

// fillArray validates shape, dtype and data and fills a.
func (d *Decoder) fillArray(a *NDArray, shape, dtype, raw Value, fortran bool) error {
	dt, ok := dtype.(*NPDType)
	if !ok {
		return fmt.Errorf("numpy array dtype is %s, not a numpy.dtype", typeName(dtype))
	}
	dims := seqItems(shape)
	if dims == nil {
		return fmt.Errorf("numpy array shape is %s, not a tuple", typeName(shape))
	}
	count := uint64(1)
	a.Shape = make([]int64, len(dims))
	for i, v := range dims {
		n, ok := v.(int64)
		if !ok || n < 0 {
			return fmt.Errorf("numpy array dimension %d is not a non-negative int", i)
		}
		a.Shape[i] = n
		hi, lo := bits.Mul64(count, uint64(n))
		if hi != 0 || lo > 1<<62 {
			return fmt.Errorf("numpy array shape %v is too large", a.Shape)
		}
		count = lo
	}
	a.Fortran, a.Descr, a.DType = fortran, dt, dt.String()
	if dt.isObject() {
		items := seqItems(raw)
		if items == nil || uint64(len(items)) != count {
			return fmt.Errorf("numpy object array of %d elements needs a list of that length, got %s", count, typeName(raw))
		}
		a.Objects = items
		a.built = true
		return nil
	}
	size, ok := dt.ItemSize()
	if !ok {
		return fmt.Errorf("numpy dtype %q has no known item size", dt.Name)
	}
	data, err := d.rawBytes(raw)
	if err != nil {
		return err
	}
	if hi, want := bits.Mul64(count, uint64(size)); hi != 0 || want != uint64(len(data)) {
		return fmt.Errorf("numpy array data has %d bytes, shape %v of %s needs %d×%d", len(data), a.Shape, a.DType, count, size)
	}
	a.Data = data
	a.built = true
	return nil
}

// rawBytes returns the bytes of numpy raw data: bytes, or a Python 2 str
// (see decodePy2Str; latin-1 fallbacks are reversed).
func (d *Decoder) rawBytes(v Value) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		if err := d.charge(int64(len(x)), "numpy data"); err != nil {
			return nil, err
		}
		if _, ok := d.latin1[x]; ok {
			return latin1Bytes(x)
		}
		return []byte(x), nil
	}
	return nil, fmt.Errorf("numpy raw data is %s, not bytes", typeName(v))
}

func (d *Decoder) numpyScalar(args Tuple) (Value, bool, error) {
	if len(args) < 1 || len(args) > 2 {
		return nil, false, nil
	}
	dt, ok := args[0].(*NPDType)
	if !ok {
		return nil, false, nil
	}
	if dt.isObject() {
		if len(args) == 2 {
			return args[1], true, nil // numpy returns the object itself
		}
		return nil, false, nil
	}
	size, ok := dt.ItemSize()
	if !ok {
		return nil, false, fmt.Errorf("numpy dtype %q has no known item size", dt.Name)
	}
	var data []byte
	if len(args) == 2 {
		var err error
		if data, err = d.rawBytes(args[1]); err != nil {
			return nil, false, err
		}
		if int64(len(data)) != size {
			return nil, false, fmt.Errorf("numpy scalar of %s needs %d bytes, got %d", dt, size, len(data))
		}
	} else {
		if err := d.charge(size, "numpy scalar"); err != nil {
			return nil, false, err
		}
		data = make([]byte, size)
	}
	if err := d.charge(objectCost, "numpy scalar"); err != nil {
		return nil, false, err
	}
	return &NDArray{DType: dt.String(), Data: data, Scalar: true, Descr: dt, built: true}, true, nil
}

// numpyFromBuffer handles numpy.core.numeric._frombuffer(buf, dtype, shape,
// order), numpy's protocol-5 array pickle with an in-band buffer.
func (d *Decoder) numpyFromBuffer(args Tuple) (Value, bool, error) {
	if len(args) != 4 {
		return nil, false, nil
	}
	order, ok := args[3].(string)
	if !ok || (order != "C" && order != "F") {
		return nil, false, nil
	}
	if err := d.charge(objectCost, "numpy array"); err != nil {
		return nil, false, err
	}
	a := &NDArray{}
	if err := d.fillArray(a, args[2], args[1], args[0], order == "F"); err != nil {
		return nil, false, err
	}
	return a, true, nil
}
