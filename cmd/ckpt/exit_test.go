package main

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/storage"
)

// TestDescribeForceHint: only an earlier output --force would replace gets the --force
// hint; a destination ckpt may not write whatever the flags, and an unrelated "file exists"
// from the system, do not.
func TestDescribeForceHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		hint bool
	}{
		{fmt.Errorf("out: %w", atomicfile.ErrExists), true},
		{fmt.Errorf("gs://b/out: %w: holds 3 object(s)", storage.ErrExists), true},
		{fmt.Errorf("gs://b/out/x: %w: not listed by the ckpt manifest there", storage.ErrForeign), false},
		{fmt.Errorf("out: %w", atomicfile.ErrForeign), false},
		{&fs.PathError{Op: "mkdir", Path: "/tmp/x", Err: fs.ErrExist}, false},
	} {
		got := strings.Contains(describe(c.err).Error(), "--force")
		if got != c.hint {
			t.Errorf("%v: --force hint %v, want %v", c.err, got, c.hint)
		}
	}
}
