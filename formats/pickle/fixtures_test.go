package pickle

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Fixtures are written by CPython's pickle module (testdata/gen.py); their
// expected decoded values, in the canonical JSON form below, are computed
// by Python from the original objects.

type fixture struct {
	Canon     *string  `json:"canon"`
	Error     bool     `json:"error"`
	Globals   [][3]any `json:"globals"`
	Dangerous []string `json:"dangerous"`
}

type expectations struct {
	Values   map[string]any     `json:"values"`
	Fixtures map[string]fixture `json:"fixtures"`
}

func loadExpectations(t testing.TB) expectations {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expectations
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// persRef is what the tests' PersistentLoad returns.
type persRef struct{ pid Value }

func testOptions() Options {
	return Options{PersistentLoad: func(pid Value) (Value, error) { return persRef{pid}, nil }}
}

// canonValue converts a decoded value to the JSON-able canonical form of
// testdata/gen.py's canon(): ints as decimal strings, floats as IEEE bit
// patterns ("nan" for any NaN), and containers and objects numbered on
// first visit ({"id": n, ...}) and referenced afterwards ({"ref": n}), so
// shared and cyclic values compare exactly.
func canonValue(v Value) any {
	c := canonizer{ids: map[any]int{}}
	return c.value(v)
}

type canonizer struct{ ids map[any]int }

func fhex(f float64) string {
	if math.IsNaN(f) {
		return "nan"
	}
	return fmt.Sprintf("0x%016x", math.Float64bits(f))
}

func (c *canonizer) list(vs []Value) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = c.value(v)
	}
	return out
}

// visit returns the ref for a seen pointer, else numbers it.
func (c *canonizer) visit(p any) (map[string]any, bool) {
	if id, ok := c.ids[p]; ok {
		return map[string]any{"ref": id}, true
	}
	id := len(c.ids) + 1
	c.ids[p] = id
	return map[string]any{"id": id}, false
}

func (c *canonizer) dictItems(d *Dict) []any {
	out := []any{}
	for k, v := range d.All() {
		out = append(out, []any{c.value(k), c.value(v)})
	}
	return out
}

func (c *canonizer) value(v Value) any {
	switch x := v.(type) {
	case nil, None:
		return nil
	case bool:
		return x
	case int64:
		return map[string]any{"int": strconv.FormatInt(x, 10)}
	case *big.Int:
		return map[string]any{"int": x.String()}
	case float64:
		return map[string]any{"float": fhex(x)}
	case complex128:
		return map[string]any{"complex": []any{fhex(real(x)), fhex(imag(x))}}
	case string:
		return map[string]any{"str": x}
	case []byte:
		return map[string]any{"bytes": hex.EncodeToString(x)}
	case Tuple:
		return map[string]any{"tuple": c.list(x)}
	case *Set:
		return map[string]any{"set": c.list(x.Items), "frozen": x.Frozen}
	case Global:
		return map[string]any{"global": x.String()}
	case persRef:
		return map[string]any{"persid": c.value(x.pid)}
	case *List:
		m, seen := c.visit(x)
		if !seen {
			m["list"] = c.list(x.Items)
		}
		return m
	case *Dict:
		m, seen := c.visit(x)
		if seen {
			return m
		}
		m["dict"] = c.dictItems(x)
		if x.Class != nil {
			m["class"] = x.Class.String()
		}
		if x.State != nil {
			m["state"] = c.value(x.State)
		}
		if x.Default != nil {
			m["default"] = c.value(x.Default)
		}
		return m
	case *Object:
		m, seen := c.visit(x)
		if seen {
			return m
		}
		m["object"] = x.Class.String()
		m["kind"] = x.Kind.String()
		m["args"] = c.list(x.Args)
		if x.Kwargs != nil {
			m["kwargs"] = c.value(x.Kwargs)
		}
		if x.State != nil {
			m["state"] = c.value(x.State)
		}
		if x.ListItems != nil {
			m["listitems"] = c.list(x.ListItems)
		}
		if x.DictItems != nil {
			m["dictitems"] = c.value(x.DictItems)
		}
		return m
	case *NDArray:
		m := map[string]any{"ndarray": x.DType, "shape": x.Shape, "fortran": x.Fortran, "scalar": x.Scalar,
			"data": hex.EncodeToString(x.Data)}
		if x.Objects != nil {
			m["objects"] = c.list(x.Objects)
		}
		return m
	case *NPDType:
		return map[string]any{"dtype": x.String()}
	}
	return map[string]any{"unknown": fmt.Sprintf("%T", v)}
}

// normalize round-trips through JSON (so numbers compare alike) and sorts
// set items, whose order is Python's hash order.
func normalize(t testing.TB, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return sortSets(out)
}

func sortSets(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = sortSets(e)
		}
		if items, ok := x["set"].([]any); ok {
			slices.SortFunc(items, func(a, b any) int {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				return slices.Compare(ja, jb)
			})
		}
	case []any:
		for i, e := range x {
			x[i] = sortSets(e)
		}
	}
	return v
}

// firstDiff returns the path of the first difference between a and b.
func firstDiff(path string, a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return path
		}
		for k := range x {
			if p := firstDiff(path+"."+k, x[k], y[k]); p != "" {
				return p
			}
		}
		for k := range y {
			if _, ok := x[k]; !ok {
				return path + "." + k
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Sprintf("%s (len %d vs %v)", path, len(x), b)
		}
		for i := range x {
			if p := firstDiff(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); p != "" {
				return p
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("%s: %v vs %v", path, a, b)
	}
	return ""
}

func fixtureNames(e expectations) []string {
	names := make([]string, 0, len(e.Fixtures))
	for n := range e.Fixtures {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestFixturesDecode(t *testing.T) {
	e := loadExpectations(t)
	for _, name := range fixtureNames(e) {
		fx := e.Fixtures[name]
		t.Run(name, func(t *testing.T) {
			data := readFixture(t, name)
			d := NewDecoder(data, testOptions())
			v, err := d.Decode()
			if fx.Error {
				var perr *ckpterr.FormatError
				if !errors.As(err, &perr) {
					t.Fatalf("want *ckpterr.FormatError, got %v (value %v)", err, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fx.Canon == nil {
				return
			}
			if d.Offset() != int64(len(data)) {
				t.Errorf("Offset = %d, want %d", d.Offset(), len(data))
			}
			got := normalize(t, canonValue(v))
			want := normalize(t, e.Values[*fx.Canon])
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded value differs at %s", firstDiff("", got, want))
			}
		})
	}
}

func TestFixturesScan(t *testing.T) {
	e := loadExpectations(t)
	for _, name := range fixtureNames(e) {
		fx := e.Fixtures[name]
		t.Run(name, func(t *testing.T) {
			rep, err := Scan(readFixture(t, name))
			if err != nil && !fx.Error {
				t.Fatal(err)
			}
			var got [][3]any
			for _, g := range rep.Globals {
				got = append(got, [3]any{g.Global.String(), float64(g.Offset), g.Opcode})
				want := slices.Contains(fx.Dangerous, g.Global.String())
				if (g.Class == Unsafe) != want {
					t.Errorf("%s at %d classified %v (%s), want dangerous=%v", g.Global, g.Offset, g.Class, g.Why, want)
				}
				if g.Class == Unsafe && g.Why == "" {
					t.Errorf("%s: dangerous without a reason", g.Global)
				}
			}
			if len(got) != len(fx.Globals) || (len(got) > 0 && !reflect.DeepEqual(got, fx.Globals)) {
				t.Errorf("globals\n got %v\nwant %v", got, fx.Globals)
			}
			if len(fx.Dangerous) > 0 && rep.Worst() != Unsafe {
				t.Errorf("Worst() = %v, want dangerous", rep.Worst())
			}
		})
	}
}

// Malicious fixtures decode inertly in the default mode and fail in Strict
// mode at the first dangerous global.
func TestFixturesMalicious(t *testing.T) {
	e := loadExpectations(t)
	for _, name := range fixtureNames(e) {
		fx := e.Fixtures[name]
		if len(fx.Dangerous) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			data := readFixture(t, name)
			_, err := NewDecoder(data, Options{Strict: true}).Decode()
			var de *DisallowedError
			if !errors.As(err, &de) || !errors.Is(err, ErrNotAllowed) {
				t.Fatalf("strict: want DisallowedError, got %v", err)
			}
			first := fx.Globals[0]
			if de.Global.String() != first[0] {
				t.Errorf("strict refused %s, want %s", de.Global, first[0])
			}
			var perr *ckpterr.FormatError
			if !errors.As(err, &perr) || perr.Offset != int64(first[1].(float64)) || perr.Item != first[2] {
				t.Errorf("strict error %v, want offset %v op %v", err, first[1], first[2])
			}
			if want := fmt.Sprintf("unsupported global: %s %s", first[2], first[0]); de.Error() != want {
				t.Errorf("message %q, want %q", de.Error(), want)
			}
			if fx.Canon != nil {
				v, err := NewDecoder(data, Options{}).Decode()
				if err != nil {
					t.Fatal(err)
				}
				if o, ok := v.(*Object); !ok || o.Class.String() != fx.Dangerous[0] {
					t.Errorf("decoded %#v, want an inert %s object", v, fx.Dangerous[0])
				}
			}
		})
	}
}

// Every strict prefix of every fixture fails cleanly, and truncation shows
// as io.ErrUnexpectedEOF (io.EOF for the empty prefix).
func TestFixturesTruncated(t *testing.T) {
	e := loadExpectations(t)
	for _, name := range fixtureNames(e) {
		fx := e.Fixtures[name]
		data := readFixture(t, name)
		full := countPickles(t, data)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			truncations(t, name, data, fx, full)
		})
	}
}

func truncations(t *testing.T, name string, data []byte, fx fixture, full int) {
	for n := 0; n < len(data); n++ {
		prefix := data[:n]
		d := NewDecoder(prefix, testOptions())
		var err error
		for decoded := 0; ; decoded++ {
			if _, err = d.Decode(); err != nil {
				if decoded >= full {
					t.Fatalf("%s[:%d]: decoded %d pickles, the full data has %d", name, n, decoded, full)
				}
				break
			}
		}
		var perr *ckpterr.FormatError
		if !errors.As(err, &perr) {
			t.Fatalf("%s[:%d]: error %v is not *ckpterr.FormatError", name, n, err)
		}
		if !fx.Error && !errors.Is(err, io.ErrUnexpectedEOF) && !(d.Offset() == int64(n) && errors.Is(err, io.EOF)) {
			t.Fatalf("%s[:%d]: %v, want unexpected EOF", name, n, err)
		}
		// A prefix may end exactly after one of several pickles.
		if rep, err := Scan(prefix); err == nil && (rep.End != int64(n) || rep.Pickles >= full) {
			t.Fatalf("%s[:%d]: Scan succeeded on a truncated pickle", name, n)
		}
	}
}

func countPickles(t *testing.T, data []byte) int {
	d := NewDecoder(data, testOptions())
	n := 0
	for d.Offset() < int64(len(data)) {
		if _, err := d.Decode(); err != nil {
			return n + 1
		}
		n++
	}
	return n
}

// The legacy torch stream: magic number, protocol version and a dict,
// pickled back to back.
func TestMultiplePickles(t *testing.T) {
	data := readFixture(t, "multi_p2.pkl")
	d := NewDecoder(data, Options{})
	var got []Value
	for d.Offset() < int64(len(data)) {
		v, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	magic, _ := new(big.Int).SetString("1950a86a20f9469cfc6c", 16)
	if len(got) != 3 || got[0].(*big.Int).Cmp(magic) != 0 || got[1] != int64(1001) {
		t.Fatalf("got %v", got)
	}
	if v, ok := got[2].(*Dict).Get("a"); !ok || v != int64(1) {
		t.Errorf("third pickle: %v", got[2])
	}
	if _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("Decode at end: %v, want io.EOF", err)
	}
	rep, err := Scan(data)
	if err != nil || rep.Pickles != 3 || rep.End != int64(len(data)) || rep.Protocol != 2 {
		t.Errorf("Scan = %+v, %v", rep, err)
	}
}
