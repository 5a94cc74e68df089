package bucket

import (
	"path"
	"strings"
	"testing"
)

// FuzzEntryName: whatever a listing returns, a key becomes one path element of the
// listed folder or is refused — never "", "." or "..", never a name holding a slash, so
// the folder joined with it is strictly inside the folder (a walk neither loops nor leaves
// the prefix) — and the name maps back to the key.
func FuzzEntryName(f *testing.F) {
	for _, s := range []struct {
		prefix, key string
		dir         bool
	}{
		{"run/", "run/model.safetensors", false},
		{"run/", "run/sub/", true},
		{"run/", "run/./", true},
		{"run/", "run/../", true},
		{"run/", "run//", true},
		{"run/", "run/.", false},
		{"run/", "run/..", false},
		{"run/", "run/", false},
		{"", "..", false},
		{"", "./", true},
		{"run/", "other/x", false},
		{"a/b/", "a/b/c/d", false},
	} {
		f.Add(s.prefix, s.key, s.dir)
	}
	f.Fuzz(func(t *testing.T, prefix, key string, dir bool) {
		name, ok, err := entryName(prefix, key, dir)
		if err != nil || !ok {
			if ok || name != "" {
				t.Fatalf("entryName(%q, %q, %v) = %q, %v, %v", prefix, key, dir, name, ok, err)
			}
			return
		}
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			t.Fatalf("entryName(%q, %q, %v) = %q: not one path element", prefix, key, dir, name)
		}
		back := prefix + name
		if dir {
			back += "/"
		}
		if back != key {
			t.Fatalf("entryName(%q, %q, %v) = %q, which maps back to %q", prefix, key, dir, name, back)
		}
		folder := "/root/" + prefix
		if p := path.Join(folder, name); !strings.HasPrefix(p, path.Clean(folder)+"/") {
			t.Fatalf("entryName(%q, %q, %v) = %q: joined to the folder it is %q, outside it", prefix, key, dir, name, p)
		}
	})
}
