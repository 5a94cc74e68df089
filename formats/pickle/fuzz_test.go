package pickle

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
				var perr *Error
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
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("bad error %v", err)
			}
		}
		for _, g := range rep.Globals {
			if g.Offset < 0 || g.Offset >= int64(len(data)) || (g.Class == Unsafe) != (g.Why != "") {
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
