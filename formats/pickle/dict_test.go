package pickle

import (
	"errors"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

func TestDictPythonKeyEquality(t *testing.T) {
	obj := &Object{Class: Global{"m", "C"}}
	equal := [][]Value{
		{true, int64(1), 1.0, big.NewInt(1), complex(1, 0)},
		{false, int64(0), 0.0, math.Copysign(0, -1), complex(0, math.Copysign(0, -1))},
		{new(big.Int).Lsh(big.NewInt(1), 70), math.Ldexp(1, 70)},
		{int64(math.MinInt64), -math.Ldexp(1, 63)},
		{Tuple{int64(1), "a"}, Tuple{1.0, "a"}},
		{&Set{Items: []Value{int64(1), int64(2)}, Frozen: true}, &Set{Items: []Value{int64(2), int64(1)}, Frozen: true}},
		{Global{"torch", "float32"}, Global{"torch", "float32"}},
		{obj, obj},
		{None{}, None{}},
		{"s", "s"},
		{[]byte("s"), []byte("s")},
		{2.5, complex(2.5, 0)},
	}
	for _, group := range equal {
		d := &Dict{}
		d.Set(group[0], 0)
		for i, k := range group[1:] {
			if v, ok := d.Get(k); !ok || v != i {
				t.Errorf("Get(%#v) after Set(%#v): %v %v", k, group[0], v, ok)
			}
			d.Set(k, i+1)
		}
		if d.Len() != 1 {
			t.Errorf("group %#v: %d keys", group, d.Len())
		}
		sameValue(t, d.Keys()[0], group[0]) // the original key object is kept
	}
	distinct := []Value{"1", []byte("1"), int64(1) + 1, 1.5, Tuple{int64(1)}, Tuple{int64(1), int64(1)},
		&Object{Class: Global{"m", "C"}}, &Object{Class: Global{"m", "C"}}, Global{"m", "C"}, None{}, complex(1, 1)}
	d := &Dict{}
	for i, k := range distinct {
		d.Set(k, i)
	}
	if d.Len() != len(distinct) {
		t.Errorf("distinct keys collapsed: %d of %d", d.Len(), len(distinct))
	}
	// NaN equals nothing, not even itself.
	n := &Dict{}
	n.Set(math.NaN(), 1)
	n.Set(math.NaN(), 2)
	n.Set(Tuple{math.NaN()}, 3)
	if _, ok := n.Get(math.NaN()); ok || n.Len() != 3 {
		t.Errorf("NaN keys: len %d", n.Len())
	}
}

func TestDictOrderAndAPI(t *testing.T) {
	d := mkDict("b", int64(1), "a", int64(2), "c", int64(3))
	d.Set("a", int64(20)) // replacing keeps the position
	keys, vals := d.Items()
	if !reflect.DeepEqual(keys, []Value{"b", "a", "c"}) || !reflect.DeepEqual(vals, []Value{int64(1), int64(20), int64(3)}) {
		t.Errorf("items %v %v", keys, vals)
	}
	var seen []Value
	for k := range d.All() {
		seen = append(seen, k)
		if len(seen) == 2 {
			break
		}
	}
	if !reflect.DeepEqual(seen, []Value{"b", "a"}) {
		t.Errorf("All stopped early: %v", seen)
	}
	if _, ok := d.Get("zz"); ok {
		t.Error("Get of a missing key")
	}
	if _, ok := d.Get(&List{}); ok {
		t.Error("Get of an unhashable key")
	}
	for _, k := range []Value{&List{}, &Dict{}, &Set{}, &NDArray{}, Tuple{&List{}}, &Set{Frozen: true, Items: []Value{&List{}}}, struct{}{}} {
		if err := d.TrySet(k, 1); err == nil || !strings.Contains(err.Error(), "unhashable") {
			t.Errorf("TrySet(%T): %v", k, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Set with an unhashable key did not panic")
		}
	}()
	d.Set(&List{}, 1)
}

func TestSetContains(t *testing.T) {
	s := &Set{}
	for _, v := range []Value{int64(1), true, 1.0, "x"} {
		if _, _, err := s.add(v, maxKeyBytes); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Items) != 2 || !s.Contains(1.0) || !s.Contains("x") || s.Contains("y") || s.Contains(&List{}) {
		t.Errorf("set %v", s.Items)
	}
	byHand := &Set{Items: []Value{"a", Tuple{int64(1)}}}
	if !byHand.Contains("a") || !byHand.Contains(Tuple{1.0}) || byHand.Contains("b") {
		t.Error("Contains on a Set built by hand")
	}
	byHand.Items = append(byHand.Items, "b")
	if !byHand.Contains("b") {
		t.Error("Contains after appending by hand")
	}
}

// Tuples sharing items through DUP describe keys exponentially larger than
// the pickle: hashing one stops at the allocation budget.
func TestDictKeyDAG(t *testing.T) {
	in := []byte("}N\x85" + strings.Repeat("2\x86", 90) + "Ns.")
	var err error
	n := allocDuring(func() { _, err = NewDecoder([]byte(in), Options{Limits: Limits{MaxAlloc: 1 << 20}}).Decode() })
	if !errors.Is(err, ErrLimit) || n > 16<<20 {
		t.Errorf("got %v after allocating %d bytes", err, n)
	}
}
