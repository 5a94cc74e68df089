package pickle

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
)

// HAND-ASSEMBLED numpy pickles. numpy is not installed on the development
// host, so these opcode sequences reproduce byte for byte what numpy's
// array_reduce / arraydescr_reduce / gentype_reduce emit through CPython's
// pickler (memo indices included). Replace them with files written by the
// torch oracle when it is available.

// npDType writes numpy.dtype(name, False, True) + BUILD of the version-3
// state (3, endian, None, None, None, elsize, alignment, flags), protocol 2.
func (p *pb) npDType(module, name, endian string, elsize, align, flags int64) *pb {
	p.global(module, "dtype")
	p.put()
	p.str(name)
	p.put()
	p.op(opNewFalse, opNewTrue, opTuple3)
	p.put()
	p.op(opReduce)
	p.put()
	p.op(opMark).int(3).str(endian)
	p.put()
	p.op(opNone, opNone, opNone).int(elsize).int(align).int(flags)
	p.op(opTuple)
	p.put()
	return p.op(opBuild)
}

// npArrayP2 is numpy 1.x, protocol 2: _reconstruct(ndarray, (0,), b'b') and
// BUILD (1, shape, dtype, is_fortran, rawdata), bytes via _codecs.encode.
func npArrayP2(shape []int64, dtype func(p *pb), fortran bool, raw []byte) []byte {
	p := new(pb).proto(2)
	p.global("numpy.core.multiarray", "_reconstruct")
	p.put()
	p.global("numpy", "ndarray")
	p.put()
	p.int(0).op(opTuple1)
	p.put()
	p.global("_codecs", "encode")
	enc := p.put()
	p.str("b")
	p.put()
	p.str("latin1")
	latin1 := p.put()
	p.op(opTuple2)
	p.put()
	p.op(opReduce)
	p.put()
	p.op(opTuple3)
	p.put()
	p.op(opReduce)
	p.put()
	p.op(opMark).int(1)
	p.op(opMark)
	for _, n := range shape {
		p.int(n)
	}
	p.op(opTuple)
	p.put()
	dtype(p)
	if fortran {
		p.op(opNewTrue)
	} else {
		p.op(opNewFalse)
	}
	p.get(enc).str(latin1UTF8(raw))
	p.put()
	p.get(latin1).op(opTuple2)
	p.put()
	p.op(opReduce)
	p.put()
	p.op(opTuple)
	p.put()
	p.op(opBuild)
	return p.stop()
}

func f64s(vs ...float64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

func TestNumpyArrayProtocol2(t *testing.T) {
	raw := f64s(1, 2, 3)
	in := npArrayP2([]int64{3}, func(p *pb) { p.npDType("numpy", "f8", "<", -1, -1, 0) }, false, raw)
	a := decodeOne(t, in, Options{}).(*NDArray)
	if a.DType != "<f8" || !reflect.DeepEqual(a.Shape, []int64{3}) || a.Fortran || a.Scalar || string(a.Data) != string(raw) {
		t.Errorf("got %+v", a)
	}
	if a.Descr.Version != 3 || a.Descr.ElSize != -1 || a.Descr.Endian != '<' {
		t.Errorf("dtype %+v", a.Descr)
	}
	// Fortran order, bool dtype.
	in = npArrayP2([]int64{2, 2}, func(p *pb) { p.npDType("numpy", "b1", "|", -1, -1, 0) }, true, []byte{1, 0, 0, 1})
	a = decodeOne(t, in, Options{}).(*NDArray)
	if a.DType != "|b1" || !a.Fortran || !reflect.DeepEqual(a.Shape, []int64{2, 2}) {
		t.Errorf("got %+v", a)
	}
	// Unicode: item size from the state's elsize.
	u := make([]byte, 24)
	copy(u, "a\x00\x00\x00b\x00\x00\x00")
	in = npArrayP2([]int64{2}, func(p *pb) { p.npDType("numpy", "U3", "<", 12, 4, 8) }, false, u)
	if a = decodeOne(t, in, Options{}).(*NDArray); a.DType != "<U3" || len(a.Data) != 24 {
		t.Errorf("got %+v", a)
	}
	// datetime64[ns]: version-4 state with ({}, (b'ns', 1, 1, 1)) metadata.
	dt := new(pb).proto(2)
	dt.global("numpy", "dtype").str("M8").op(opNewFalse, opNewTrue, opTuple3, opReduce)
	dt.op(opMark).int(4).str("<").op(opNone, opNone, opNone).int(-1).int(-1).int(0)
	dt.op(opEmptyDict).op(opMark).global("_codecs", "encode").str("ns").str("latin1").op(opTuple2, opReduce).int(1).int(1).int(1).op(opTuple, opTuple2)
	dt.op(opTuple, opBuild)
	if d := decodeOne(t, dt.stop(), Options{}).(*NPDType); d.String() != "<M8[ns]" || d.Version != 4 {
		t.Errorf("datetime dtype %q %+v", d, d)
	}
}

// numpy 2.x, protocol 4: numpy._core.multiarray, STACK_GLOBAL, memoized
// module names, SHORT_BINBYTES data, all in one frame.
func TestNumpyArrayProtocol4(t *testing.T) {
	raw := make([]byte, 32)
	for i := range 4 {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(i))
	}
	body := new(pb)
	body.sstr("numpy._core.multiarray").op(opMemoize).sstr("_reconstruct").op(opMemoize).op(opStackGlobal, opMemoize)
	body.sstr("numpy").op(opMemoize).sstr("ndarray").op(opMemoize).op(opStackGlobal, opMemoize)
	body.int(0).op(opTuple1, opMemoize).sbytes([]byte("b")).op(opMemoize).op(opTuple3, opMemoize, opReduce, opMemoize)
	body.op(opMark).int(1).int(2).int(2).op(opTuple2, opMemoize)
	body.op(opBinGet, 3).sstr("dtype").op(opMemoize).op(opStackGlobal, opMemoize).sstr("i8").op(opMemoize)
	body.op(opNewFalse, opNewTrue, opTuple3, opMemoize, opReduce, opMemoize)
	body.op(opMark).int(3).sstr("<").op(opMemoize).op(opNone, opNone, opNone).int(-1).int(-1).int(0).op(opTuple, opMemoize, opBuild)
	body.op(opNewFalse).sbytes(raw).op(opMemoize).op(opTuple, opMemoize, opBuild, opStop)
	in := new(pb).proto(4).op(opFrame).u64(uint64(body.Len()))
	in.Write(body.Bytes())
	a := decodeOne(t, in.Bytes(), Options{}).(*NDArray)
	if a.DType != "<i8" || !reflect.DeepEqual(a.Shape, []int64{2, 2}) || string(a.Data) != string(raw) {
		t.Errorf("got %+v", a)
	}
	rep, err := Scan(in.Bytes())
	if err != nil || len(rep.Globals) != 3 || rep.Globals[2].Global != (Global{"numpy", "dtype"}) {
		t.Errorf("Scan: %+v %v", rep.Globals, err)
	}
}

// numpy.float64(1.5): scalar(dtype, rawdata), protocol 2.
func TestNumpyScalar(t *testing.T) {
	p := new(pb).proto(2)
	p.global("numpy.core.multiarray", "scalar")
	p.put()
	p.npDType("numpy", "f8", "<", -1, -1, 0)
	p.global("_codecs", "encode")
	p.put()
	p.str(latin1UTF8(f64s(1.5)))
	p.put()
	p.str("latin1")
	p.put()
	p.op(opTuple2)
	p.put()
	p.op(opReduce)
	p.put()
	p.op(opTuple2)
	p.put()
	p.op(opReduce)
	p.put()
	a := decodeOne(t, p.stop(), Options{}).(*NDArray)
	if !a.Scalar || a.DType != "<f8" || len(a.Shape) != 0 || math.Float64frombits(binary.LittleEndian.Uint64(a.Data)) != 1.5 {
		t.Errorf("got %+v", a)
	}
	// Object scalars are the object itself.
	q := new(pb).proto(2).global("numpy.core.multiarray", "scalar")
	q.npDType("numpy", "O8", "|", -1, -1, 63).str("x").op(opTuple2, opReduce)
	if v := decodeOne(t, q.stop(), Options{}); v != "x" {
		t.Errorf("object scalar: %v", v)
	}
}

// Object arrays carry their items as a list.
func TestNumpyObjectArray(t *testing.T) {
	p := new(pb).proto(2)
	p.global("numpy.core.multiarray", "_reconstruct").global("numpy", "ndarray").int(0).op(opTuple1)
	p.sbytes([]byte("b")).op(opTuple3, opReduce)
	p.op(opMark).int(1).int(2).op(opTuple1)
	p.npDType("numpy", "O8", "|", -1, -1, 63)
	p.op(opNewFalse, opEmptyList, opMark).int(1).str("a").op(opAppends, opTuple, opBuild)
	a := decodeOne(t, p.stop(), Options{}).(*NDArray)
	if a.DType != "|O" || a.Data != nil || len(a.Objects) != 2 || a.Objects[1] != "a" {
		t.Errorf("got %+v", a)
	}
}

// numpy >= 1.16 with protocol 5: _frombuffer(bytearray, dtype, shape, order).
func TestNumpyFromBuffer(t *testing.T) {
	raw := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}
	p := new(pb).proto(5)
	p.sstr("numpy._core.numeric").op(opMemoize).sstr("_frombuffer").op(opMemoize).op(opStackGlobal, opMemoize)
	p.op(opMark, opByteArray8).u64(uint64(len(raw)))
	p.Write(raw)
	p.op(opMemoize).sstr("numpy").op(opMemoize).sstr("dtype").op(opMemoize).op(opStackGlobal, opMemoize)
	p.sstr("i4").op(opMemoize).op(opNewFalse, opNewTrue, opTuple3, opMemoize, opReduce, opMemoize)
	p.op(opMark).int(3).sstr("<").op(opMemoize, opNone, opNone, opNone).int(-1).int(-1).int(0).op(opTuple, opMemoize, opBuild)
	p.int(3).op(opTuple1, opMemoize).sstr("C").op(opMemoize, opTuple, opMemoize, opReduce, opMemoize)
	a := decodeOne(t, p.stop(), Options{}).(*NDArray)
	if a.DType != "<i4" || !reflect.DeepEqual(a.Shape, []int64{3}) || string(a.Data) != string(raw) {
		t.Errorf("got %+v", a)
	}
}

// Python 2 numpy pickles carry raw data as a str: latin-1 fallbacks are
// reversed exactly.
func TestNumpyPy2RawData(t *testing.T) {
	raw := f64s(1, -2) // contains 0xf0, 0xc0: not UTF-8
	p := new(pb).proto(2)
	p.global("numpy.core.multiarray", "_reconstruct").global("numpy", "ndarray").int(0).op(opTuple1)
	p.op(opShortBinString, 1, 'b').op(opTuple3, opReduce)
	p.op(opMark).int(1).int(2).op(opTuple1)
	p.global("numpy", "dtype").op(opShortBinString, 2, 'f', '8').int(0).int(1).op(opTuple3, opReduce)
	p.op(opMark).int(3).op(opShortBinString, 1, '<').op(opNone, opNone, opNone).int(-1).int(-1).int(0).op(opTuple, opBuild)
	p.op(opNewFalse, opShortBinString, byte(len(raw)))
	p.Write(raw)
	p.op(opTuple, opBuild)
	a := decodeOne(t, p.stop(), Options{}).(*NDArray)
	if string(a.Data) != string(raw) || a.DType != "<f8" {
		t.Errorf("got %+v", a)
	}
}

func TestNumpyErrors(t *testing.T) {
	dt := func(p *pb) { p.npDType("numpy", "f8", "<", -1, -1, 0) }
	tests := []struct {
		name string
		in   []byte
		msg  string
	}{
		{"data size", npArrayP2([]int64{3}, dt, false, f64s(1, 2)), "needs 3×8"},
		{"huge shape", npArrayP2([]int64{1 << 40, 1 << 40}, dt, false, nil), "too large"},
		{"bad endian", npArrayP2([]int64{1}, func(p *pb) { p.npDType("numpy", "f8", "?", -1, -1, 0) }, false, f64s(1)), "byte order"},
		{"rebuilt twice", append(bytes.TrimSuffix(npArrayP2([]int64{1}, dt, false, f64s(1)), []byte(".")), "Nb."...), "already built"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewDecoder(tc.in, Options{}).Decode()
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want %q", err, tc.msg)
			}
		})
	}
}
