package megatron

import (
	"errors"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

func TestParseTracker(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"100", "iter_0000100", nil},
		{" 42\n", "iter_0000042", nil},
		{"12345678", "iter_12345678", nil},
		{"release\n", "release", nil},
		{"", "", ckpterr.ErrCorrupt},
		{"-1", "", ckpterr.ErrCorrupt},
		{"iter_0000100", "", ckpterr.ErrCorrupt},
		{"../x", "", ckpterr.ErrCorrupt},
	} {
		got, err := ParseTracker([]byte(c.in))
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%q: %q %v, want %q %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestParseBackend(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{`{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}`, "torch_dist", nil},
		{`{"sharded_backend": "zarr"}`, "zarr", nil},
		{`{"common_backend": "torch"}`, "", ckpterr.ErrCorrupt},
		{`{"sharded_backend": "torch_dist", "common_backend": "pickle"}`, "", ckpterr.ErrUnsupported},
		{`[1]`, "", ckpterr.ErrCorrupt},
	} {
		got, err := ParseBackend([]byte(c.in))
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: %q %v, want %q %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestMerge follows dist_checkpointing's merge: dicts key by key, lists item by item, any
// other value in both an error naming where.
func TestMerge(t *testing.T) {
	common := statedict.NewDict("")
	opt := statedict.NewDict("")
	opt.Set("param_groups", &statedict.List{Items: []statedict.Value{int64(1)}})
	common.Set("optimizer", opt)
	common.Set("iteration", int64(5))
	sharded := statedict.NewDict("")
	so := statedict.NewDict("")
	so.Set("state", "x")
	sharded.Set("optimizer", so)
	sharded.Set("w", "t")
	v, err := merge(common, sharded, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	statedict.Walk(v, "", func(n string, _ statedict.Value) error { names = append(names, n); return nil })
	want := []string{"optimizer.param_groups.0", "optimizer.state", "iteration", "w"}
	if len(names) != len(want) {
		t.Fatalf("%v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("%v, want %v", names, want)
		}
	}
	clash := statedict.NewDict("")
	clash.Set("iteration", int64(6))
	if _, err := merge(common, clash, ""); err == nil || err.Error() != "iteration: a int64 in one and a int64 in the other" {
		t.Errorf("got %v", err)
	}
}

func FuzzParseTracker(f *testing.F) {
	for _, s := range []string{"100", "release", " 7\n", "x", "-3", "99999999999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, err := ParseTracker(b)
		if err == nil && dir != "release" && (len(dir) < 12 || dir[:5] != "iter_") {
			t.Fatalf("%q → %q", b, dir)
		}
	})
}

func FuzzParseBackend(f *testing.F) {
	f.Add([]byte(`{"sharded_backend": "torch_dist", "common_backend": "torch"}`))
	f.Add([]byte(`{"sharded_backend": ""}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := ParseBackend(b); err == nil && s == "" {
			t.Fatalf("%q: empty backend accepted", b)
		}
	})
}
