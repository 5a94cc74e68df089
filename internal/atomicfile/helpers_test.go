package atomicfile

import (
	"context"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// bg is the context the tests write outputs under.
var bg = context.Background()

// sum is the record of a file of content as ckpt journals it.
func sum(name, content string) Journaled {
	return Journaled{File: name, Size: int64(len(content)), XXHash64: fmt.Sprintf("%016x", xxhash.Sum64String(content))}
}

// claimed is an Owner proving the files of files (name → content); an empty content
// claims the name as the record itself (a manifest).
func claimed(files map[string]string) Owner {
	return func(string) ([]Journaled, bool) {
		var out []Journaled
		for n, c := range files {
			if c == "" {
				out = append(out, Journaled{File: n, Size: -1})
				continue
			}
			out = append(out, sum(n, c))
		}
		return out, true
	}
}

// writeFile writes a file of a folder output as a caller does: created, written, fsynced
// and journaled as finished.
func writeFile(t *testing.T, d *Dir, name, content string) {
	t.Helper()
	f, err := d.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.Finished(sum(name, content)); err != nil {
		t.Fatal(err)
	}
}
