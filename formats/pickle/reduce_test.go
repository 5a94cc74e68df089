package pickle

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// reducePickle is f(1, 2) memoized and fetched again, (f(1,2), f(1,2), g(3)) — the shape of a
// tensor referenced twice next to another call.
func reducePickle() []byte {
	e := NewEncoder()
	e.Op(OpMark)
	e.Global(Global{"m", "f"})
	e.Int(1)
	e.Int(2)
	e.Op(OpTuple2)
	e.Op(OpReduce)
	e.Get(e.Put())
	e.Global(Global{"m", "g"})
	e.Int(3)
	e.Op(OpTuple1)
	e.Op(OpReduce)
	e.Op(OpTuple)
	return e.Finish()
}

type built struct{ a, b int64 }

// TestReduceHook checks that Options.Reduce builds the calls it takes when they are decoded
// (a memoized result stays one value), that calls it declines stay inert objects, and that its
// error is reported at the REDUCE's offset.
func TestReduceHook(t *testing.T) {
	calls := 0
	opts := Options{Reduce: func(g Global, args Tuple) (Value, bool, error) {
		if g.Name != "f" {
			return nil, false, nil
		}
		calls++
		return &built{args[0].(int64), args[1].(int64)}, true, nil
	}}
	v := decodeOne(t, reducePickle(), opts)
	tup, ok := v.(Tuple)
	if !ok || len(tup) != 3 {
		t.Fatalf("got %#v", v)
	}
	b, ok := tup[0].(*built)
	if !ok || *b != (built{1, 2}) || tup[1] != tup[0] {
		t.Errorf("taken call: got %#v and %#v, want one *built{1, 2} twice", tup[0], tup[1])
	}
	if calls != 1 {
		t.Errorf("hook called %d times for f, want 1", calls)
	}
	if o, ok := tup[2].(*Object); !ok || o.Class != (Global{"m", "g"}) || o.Kind != Reduce {
		t.Errorf("declined call: got %#v, want an inert m.g object", tup[2])
	}

	boom := errors.New("boom")
	d := NewDecoder(reducePickle(), Options{Reduce: func(Global, Tuple) (Value, bool, error) { return nil, false, boom }})
	_, err := d.Decode()
	var pe *ckpterr.FormatError
	if !errors.As(err, &pe) || !errors.Is(err, boom) || pe.Item != "REDUCE" {
		t.Fatalf("got %v, want boom wrapped in a positional REDUCE error", err)
	}
	if want := int64(strings.IndexByte(string(reducePickle()), OpReduce)); pe.Offset != want {
		t.Errorf("error at offset %d, want %d (the REDUCE)", pe.Offset, want)
	}
}

// TestReduceHookBuild checks that BUILD on a value the hook built is an error, not ignored.
func TestReduceHookBuild(t *testing.T) {
	e := NewEncoder()
	e.Global(Global{"m", "f"})
	e.Int(1)
	e.Int(2)
	e.Op(OpTuple2)
	e.Op(OpReduce)
	e.Op(OpEmptyDict)
	e.Op(OpBuild)
	d := NewDecoder(e.Finish(), Options{Reduce: func(_ Global, args Tuple) (Value, bool, error) {
		return &built{}, true, nil
	}})
	if _, err := d.Decode(); err == nil || !strings.Contains(err.Error(), "BUILD") {
		t.Fatalf("got %v, want a BUILD error", err)
	}
}
