package main

import (
	"encoding"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/verify"
	"github.com/spf13/cobra"
)

// jsonDocs are the --json outputs and the section of docs/json.md that documents each:
// the Go types printJSON encodes (with the library types they hold).
var jsonDocs = []struct {
	command string // the command with --json ("" for the error object)
	section string // its "## " heading in docs/json.md
	roots   []any
}{
	{"inspect", "inspect", []any{inspect.Report{}}},
	{"scan", "scan", []any{scanJSON{}}},
	{"convert", "convert", []any{convert.Summary{}}},
	{"check", "check", []any{verify.CheckReport{}}},
	{"verify", "verify", []any{verifyReport{}}},
	{"forward", "forward", []any{forwardReport{}}},
	{"devices", "devices", []any{devicesReport{}}},
	{"plan", "plan", []any{planReport{}}},
	{"version", "version", []any{versionReport{}}},
	{"", "Errors", []any{errorJSON{}}},
}

// marshalers are the types in those outputs that encode themselves: the fields each
// writes (nil: the fields of its struct, as for a type without the method).
var marshalers = map[reflect.Type][]string{
	reflect.TypeFor[inspect.NonTensor](): {"name", "type", "value"},
	reflect.TypeFor[convert.Summary]():   nil,
}

// jsonFields collects the JSON field names t encodes, through structs (embedded ones
// inline), pointers, slices, arrays and maps; types encoding themselves as text are
// leaves. unknown gets the types that marshal themselves without an entry in marshalers.
func jsonFields(t reflect.Type, seen map[reflect.Type]bool, fields map[string]bool, unknown map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if seen[t] {
		return
	}
	seen[t] = true
	pt := reflect.PointerTo(t)
	if t.Implements(reflect.TypeFor[json.Marshaler]()) || pt.Implements(reflect.TypeFor[json.Marshaler]()) {
		names, ok := marshalers[t]
		switch {
		case !ok:
			unknown[t.String()] = true
			return
		case names != nil:
			for _, n := range names {
				fields[n] = true
			}
			return
		}
	} else if t.Implements(reflect.TypeFor[encoding.TextMarshaler]()) || pt.Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
		return
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.Contains(tag, ",") {
			continue
		}
		if f.Anonymous && name == "" {
			jsonFields(f.Type, seen, fields, unknown) // inline, as encoding/json does
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = true
		jsonFields(f.Type, seen, fields, unknown)
	}
}

// docSection is the text of the "## heading" section of doc, up to the next "## ".
func docSection(doc, heading string) (string, bool) {
	start := strings.Index(doc, "\n## "+heading+"\n")
	if start < 0 {
		return "", false
	}
	rest := doc[start+len(heading)+5:]
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	return rest, true
}

// TestJSONDocumented: every field a command's --json output can hold is documented, as
// `name`, in that command's section of docs/json.md, and every command with --json has a
// section (issue 15, item 7).
func TestJSONDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, field := range []string{"schema_version"} {
		if !strings.Contains(doc, "`"+field+"`") {
			t.Errorf("docs/json.md does not document %s", field)
		}
	}
	documented := map[string]bool{}
	for _, d := range jsonDocs {
		documented[d.command] = true
		section, ok := docSection(doc, d.section)
		if !ok {
			t.Errorf("docs/json.md has no section \"## %s\"", d.section)
			continue
		}
		fields, unknown := map[string]bool{}, map[string]bool{}
		for _, r := range d.roots {
			jsonFields(reflect.TypeOf(r), map[reflect.Type]bool{}, fields, unknown)
		}
		for u := range unknown {
			t.Errorf("%s: %s encodes itself: list the fields it writes in marshalers", d.section, u)
		}
		if len(fields) < 3 {
			t.Errorf("%s: only %d fields found in %v", d.section, len(fields), d.roots)
		}
		var missing []string
		for f := range fields {
			if !strings.Contains(section, "`"+f+"`") {
				missing = append(missing, f)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("docs/json.md, section %q, does not document %s", d.section, strings.Join(missing, ", "))
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("json") != nil && !documented[c.Name()] {
			t.Errorf("%s has --json but no entry in jsonDocs (and docs/json.md)", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
	kinds := []string{"usage", "dangerous", "optimizer_mismatch", "verification_failed", "does_not_fit", "corrupt", "unsupported", "not_found", "error"}
	errs, _ := docSection(doc, "Errors")
	for _, k := range kinds {
		if !strings.Contains(errs, "`"+k+"`") {
			t.Errorf("docs/json.md, section Errors, does not list the kind %s", k)
		}
	}
	if !slices.Contains(kinds, errorKind(os.ErrNotExist)) || !slices.Contains(kinds, errorKind(usage(os.ErrInvalid))) {
		t.Errorf("errorKind gives kinds the list above does not hold")
	}
}

// TestJSONFieldWalk: the walk finds fields through pointers, slices, maps, embedded
// structs (inline) and self-encoding types, skips "-", and reports a self-encoding type
// it does not know — so TestJSONDocumented can fail.
func TestJSONFieldWalk(t *testing.T) {
	type inner struct {
		Deep string `json:"deep"`
	}
	type Embedded struct {
		Promoted int `json:"promoted"`
	}
	type custom struct{ X int }
	type root struct {
		Embedded
		A      string              `json:"a,omitempty"`
		B      []*inner            `json:"b"`
		C      map[string]inner    `json:"c"`
		Hidden string              `json:"-"`
		Dash   int                 `json:"-,"`
		NT     []inspect.NonTensor `json:"nt"`
		Cust   customMarshaler     `json:"cust"`
		_      custom
	}
	fields, unknown := map[string]bool{}, map[string]bool{}
	jsonFields(reflect.TypeFor[root](), map[reflect.Type]bool{}, fields, unknown)
	var got []string
	for f := range fields {
		got = append(got, f)
	}
	sort.Strings(got)
	want := []string{"-", "a", "b", "c", "cust", "deep", "name", "nt", "promoted", "type", "value"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	if !unknown["main.customMarshaler"] {
		t.Errorf("unknown self-encoding types %v, want main.customMarshaler", unknown)
	}
}

type customMarshaler struct{ Secret int }

func (customMarshaler) MarshalJSON() ([]byte, error) { return []byte(`{"secret":1}`), nil }

// TestJSONWarningsOnceTypedValues: convert --json says each warning once (not again under
// "remap"), names the types of values not written as Python does, and inspect --json gives
// counters and scheduler values as numbers and a 0-d state tensor's shape as [] (issue 15,
// item 7).
func TestJSONWarningsOnceTypedValues(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	out, err := run(t, "convert", "--json", src, t.TempDir()+"/t.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	said := map[string]int{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if k, ok := x["kind"].(string); ok {
				if m, ok := x["message"].(string); ok {
					said[k+": "+m]++
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	if len(said) < 2 {
		t.Errorf("warnings %v: want cuda_rng_dropped and values_not_written", said)
	}
	for w, n := range said {
		if n != 1 {
			t.Errorf("said %d times: %s", n, w)
		}
	}
	if strings.Contains(out, "float64") || strings.Contains(out, "int64") || !strings.Contains(out, `"optimizer.param_groups.0.lr: float"`) {
		t.Errorf("values not written should name Python types:\n%s", out)
	}

	out, err = run(t, "inspect", "--json", "--optimizer", src)
	if err != nil {
		t.Fatal(err)
	}
	var rep inspect.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	tr := rep.Training
	if len(tr.Counters) != 2 || tr.Counters[1].Path != "global_step" || tr.Counters[1].Value != float64(1099511627776) {
		t.Errorf("counters %+v: want global_step's value as a number", tr.Counters)
	}
	if len(tr.Schedulers) != 1 || tr.Schedulers[0].Values["last_epoch"] != float64(2) {
		t.Errorf("schedulers %+v: want last_epoch 2 as a number", tr.Schedulers)
	}
	if st := tr.Optimizers[0].Params[0].State[0]; st.Key != "step" || st.Shape == nil || len(st.Shape) != 0 {
		t.Errorf("state %+v: want step with shape []", st)
	}
}
