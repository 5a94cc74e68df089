package pickle

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// fuzzSeeds adds every fixture and a few hand-assembled pickles.
func fuzzSeeds(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.pkl"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(stateDictPickle(3))
	f.Add(npArrayP2([]int64{2}, func(p *pb) { p.npDType("numpy", "f8", "<", -1, -1, 0) }, false, f64s(1, 2)))
	f.Add([]byte("(S'a\\x41'\nV\\u263a\nI01\nL5L\nF1.5\ncm\nC\n(o]2a}N\x85K\x01sl."))
}

// fuzzLimits keep the fuzzer's memory use small.
var fuzzLimits = Limits{MaxAlloc: 64 << 20, MaxStringLen: 8 << 20, MaxBytesLen: 8 << 20}

func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := Options{Limits: fuzzLimits, PersistentLoad: func(pid Value) (Value, error) { return pid, nil }}
		d := NewDecoder(data, opts)
		for range 4 {
			start := d.Offset()
			v, err := d.Decode()
			if err != nil {
				var perr *ckpterr.FormatError
				if !errors.As(err, &perr) || perr.Offset < start || perr.Offset > int64(len(data)) {
					t.Fatalf("bad error %v", err)
				}
				if d.Offset() != perr.Offset && !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("offset %d after %v", d.Offset(), err)
				}
				return
			}
			if d.Offset() <= start || d.Offset() > int64(len(data)) {
				t.Fatalf("offset %d after a pickle starting at %d", d.Offset(), start)
			}
			if err := walk(v); err != nil {
				t.Fatal(err)
			}
			if d.Offset() == int64(len(data)) {
				return
			}
		}
	})
}

func FuzzScan(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Scan(data)
		if err != nil {
			var perr *ckpterr.FormatError
			if !errors.As(err, &perr) {
				t.Fatalf("bad error %v", err)
			}
		}
		for _, g := range rep.Globals {
			// Dangerous globals say why; so do findings (refused) that name no global.
			if g.Offset < 0 || g.Offset >= int64(len(data)) || g.Class == Unsafe && g.Why == "" || g.Why != "" && !g.Class.Refused() {
				t.Fatalf("bad global %+v", g)
			}
		}
		// Whatever Decode resolves, Scan saw first.
		if err == nil && rep.Worst() != Unsafe {
			_, derr := NewDecoder(data, Options{Strict: true, Limits: fuzzLimits, PersistentLoad: func(pid Value) (Value, error) { return pid, nil }}).Decode()
			if errors.Is(derr, ErrNotAllowed) && rep.Worst() == SafeAllowed {
				t.Fatalf("Scan found only allowed globals, strict Decode refused: %v", derr)
			}
		}
	})
}

// walk visits every value reachable from v once, tracking containers (and
// tuples, by backing array) by identity as consumers must: pickles share
// values, form cycles, and can describe tuple trees exponentially larger
// than themselves. It reports a value of a type outside the Value contract.
func walk(root Value) error {
	type tupleID struct {
		first *Value
		n     int
	}
	seen := map[any]bool{}
	once := func(id any) bool {
		if seen[id] {
			return false
		}
		seen[id] = true
		return true
	}
	stack := []Value{root}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch x := v.(type) {
		case nil, None, bool, int64, *big.Int, float64, complex128, string, []byte, Global:
		case Tuple:
			if len(x) > 0 && once(tupleID{&x[0], len(x)}) {
				stack = append(stack, x...)
			}
		case *List:
			if once(x) {
				stack = append(stack, x.Items...)
			}
		case *Dict:
			if once(x) {
				keys, vals := x.Items()
				stack = append(append(append(stack, keys...), vals...), x.State, x.Default)
			}
		case *Set:
			if once(x) {
				stack = append(stack, x.Items...)
			}
		case *Object:
			if once(x) {
				stack = append(append(append(stack, x.Args...), x.ListItems...), x.State)
				if x.Kwargs != nil {
					stack = append(stack, x.Kwargs)
				}
				if x.DictItems != nil {
					stack = append(stack, x.DictItems)
				}
			}
		case *NDArray:
			if once(x) {
				stack = append(stack, x.Objects...)
				if x.Descr != nil {
					stack = append(stack, x.Descr)
				}
			}
		case *NPDType:
			if once(x) {
				stack = append(stack, x.Subarray, x.Names, x.Fields, x.Metadata)
			}
		default:
			return fmt.Errorf("value of type %T outside the Value contract", v)
		}
	}
	return nil
}

// takenObject stands for an object an Options.Build hook took; shape prints it as the
// object after takenMark, which no value prints (%#v escapes a NUL).
type takenObject struct{ o *Object }

const takenMark = "\x00taken\x00"

// FuzzForgetUnfetched: decoding with Options.ForgetUnfetched, decoding from an io.ReaderAt
// a few bytes at a time, and decoding with a Build hook that takes every object (wrapping
// it), give what decoding the bytes without them gives, value for value and error for
// error, pickle after pickle: the hook is offered no object the pickle refers to twice,
// nor one it later builds again.
func FuzzForgetUnfetched(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := Options{Limits: fuzzLimits, PersistentLoad: func(pid Value) (Value, error) { return pid, nil }}
		full := NewDecoder(data, opts)
		opts.ForgetUnfetched = true
		lean := NewDecoder(data, opts)
		streamed := newDecoder(reader{src: bytes.NewReader(data), size: int64(len(data)), win: 1 + len(data)%7}, opts)
		opts.Build = func(o *Object) (Value, bool, error) { return &takenObject{o}, true, nil }
		hooked := NewDecoder(data, opts)
		for range 4 {
			v1, err1 := full.Decode()
			v2, err2 := lean.Decode()
			v3, err3 := streamed.Decode()
			v4, err4 := hooked.Decode()
			if fmt.Sprint(err1) != fmt.Sprint(err4) || full.Offset() != hooked.Offset() {
				t.Fatalf("errors differ with a Build hook:\n%v\n%v", err1, err4)
			}
			if fmt.Sprint(err1) != fmt.Sprint(err2) || full.Offset() != lean.Offset() {
				t.Fatalf("errors differ:\n%v\n%v", err1, err2)
			}
			if fmt.Sprint(err1) != fmt.Sprint(err3) || full.Offset() != streamed.Offset() {
				t.Fatalf("errors differ when streamed:\n%v\n%v", err1, err3)
			}
			if err1 != nil {
				return
			}
			a, b, c := shape(v1), shape(v2), shape(v3)
			if a != b {
				t.Fatalf("values differ:\n%.2000s\n%.2000s", a, b)
			}
			if a != c {
				t.Fatalf("values differ when streamed:\n%.2000s\n%.2000s", a, c)
			}
			if d := strings.ReplaceAll(shape(v4), takenMark, ""); a != d {
				t.Fatalf("values differ with a Build hook:\n%.2000s\n%.2000s", a, d)
			}
		}
	})
}

// shape renders a decoded value for comparison, sharing included: a container met again
// prints as the number of its first visit. NaNs print alike. Output past 1 MiB is cut.
func shape(v Value) string {
	var b strings.Builder
	seen := map[any]int{}
	var rec func(v Value)
	object := func(x *Object) {
		fmt.Fprintf(&b, "%v/%d(", x.Class, x.Kind)
		rec(x.Args)
		b.WriteString(" kw ")
		rec(x.Kwargs)
		b.WriteString(" state ")
		rec(x.State)
		b.WriteString(")")
	}
	rec = func(v Value) {
		if b.Len() > 1<<20 {
			return
		}
		if x, ok := v.(*Dict); ok && x == nil {
			b.WriteString("nil")
			return
		}
		switch x := v.(type) {
		case *List, *Dict, *Set, *Object, *takenObject:
			// A taken object counts as met under its own pointer: should the object be
			// met again elsewhere (the hook was offered an object referred to twice), it
			// prints in full there, not as a number.
			if n, ok := seen[x]; ok {
				fmt.Fprintf(&b, "#%d", n)
				return
			}
			seen[x] = len(seen)
		}
		switch x := v.(type) {
		case *List:
			b.WriteString("[")
			for _, it := range x.Items {
				rec(it)
				b.WriteString(",")
			}
			b.WriteString("]")
		case Tuple:
			b.WriteString("(")
			for _, it := range x {
				rec(it)
				b.WriteString(",")
			}
			b.WriteString(")")
		case *Dict:
			fmt.Fprintf(&b, "{%v ", x.Class)
			for k, v := range x.All() {
				rec(k)
				b.WriteString(":")
				rec(v)
				b.WriteString(",")
			}
			b.WriteString(" state ")
			rec(x.State)
			b.WriteString(" default ")
			rec(x.Default)
			b.WriteString("}")
		case *Set:
			fmt.Fprintf(&b, "set%v{", x.Frozen)
			for _, it := range x.Items {
				rec(it)
				b.WriteString(",")
			}
			b.WriteString("}")
		case *Object:
			object(x)
		case *NDArray:
			fmt.Fprintf(&b, "nd(%s %v %v %x %v ", x.DType, x.Shape, x.Fortran, x.Data, x.Scalar)
			rec(x.Descr)
			rec(Tuple(x.Objects))
			b.WriteString(")")
		case *NPDType:
			if x == nil {
				b.WriteString("nil")
			} else {
				fmt.Fprintf(&b, "%+v", *x)
			}
		case *takenObject:
			b.WriteString(takenMark)
			object(x.o)
		default:
			fmt.Fprintf(&b, "%T:%#v", v, v)
		}
	}
	rec(v)
	return b.String()
}
