package hf

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadIndex parses arbitrary index files: never a panic, and an accepted index names
// only files inside the folder, each weight once.
func FuzzReadIndex(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/hf/*/*.index.json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"weight_map": {"a": "../x", "b": "y.safetensors"}}`))
	f.Add([]byte(`{"metadata": {"total_size": 1}, "weight_map": {"a": "x", "a": "x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "model.safetensors.index.json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		idx, err := ReadIndex(context.Background(), p)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range idx.WeightMap {
			if e.File == "" || filepath.Base(e.File) != e.File || seen[e.Name] {
				t.Fatalf("accepted entry %+v", e)
			}
			seen[e.Name] = true
		}
	})
}

// FuzzParseRepoID: an accepted id maps to one cache folder name and a revision that stays
// under refs/.
func FuzzParseRepoID(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B@main", "org/name@refs/pr/1", "a/b@0123456789abcdef0123456789abcdef01234567", "../x", "a/b@../../etc", "a--b/c", "a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := ParseRepoID(s)
		if !ok {
			return
		}
		if id.String() != s && id.String()+"@" != s {
			t.Fatalf("%q parsed as %q", s, id)
		}
		folder := "models--" + id.Org + "--" + id.Name
		if strings.Contains(folder, "/") || strings.Contains(folder, "..") || strings.Count(folder, "--") != 2 {
			t.Fatalf("%q: cache folder %q", s, folder)
		}
		if r := id.Revision; strings.Contains(r, "..") || strings.HasPrefix(r, "/") || !filepath.IsLocal(filepath.FromSlash(r)) && r != "" {
			t.Fatalf("%q: revision %q leaves refs/", s, r)
		}
	})
}

// FuzzParseRef: a refs/ file is a commit hash or refused.
func FuzzParseRef(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef01234567\n"))
	f.Add([]byte("../../x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, ok := ParseRef(b); ok && (len(c) != 40 || strings.ContainsAny(c, "/.\n")) {
			t.Fatalf("%q accepted as %q", b, c)
		}
	})
}
