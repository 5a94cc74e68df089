package storage_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
)

// readOnly is a backend that reads and cannot write.
type readOnly struct{}

func (readOnly) Open(context.Context, string) (storage.File, error) { return nil, fs.ErrNotExist }
func (readOnly) Stat(context.Context, string) (fs.FileInfo, error)  { return nil, fs.ErrNotExist }
func (readOnly) ReadDir(context.Context, string) ([]fs.DirEntry, error) {
	return nil, fs.ErrNotExist
}

// TestOutputUnsupported: an output through a backend that cannot write one is the family's
// ckpterr.ErrUnsupported (not the standard library's errors.ErrUnsupported, which no
// caller sorting ckpt's errors looks for).
func TestOutputUnsupported(t *testing.T) {
	storage.Register("readonlytest", readOnly{})
	ctx := context.Background()
	if _, err := storage.CreateOutput(ctx, "readonlytest://b/out", storage.OutputOptions{}); !errors.Is(err, ckpterr.ErrUnsupported) {
		t.Errorf("CreateOutput: %v, want ckpterr.ErrUnsupported", err)
	}
	if _, err := storage.JoinOutput(ctx, "readonlytest://b/out", storage.SharedOptions{}); !errors.Is(err, ckpterr.ErrUnsupported) {
		t.Errorf("JoinOutput: %v, want ckpterr.ErrUnsupported", err)
	}
}
