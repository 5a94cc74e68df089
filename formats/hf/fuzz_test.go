package hf

import (
	"os"
	"path/filepath"
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
		idx, err := ReadIndex(p)
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
