package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-dev/ckpt/storage"
)

// fs:/// paths have no host: their folders are prefixes down to fs:///, which is its own
// folder, as the readers' walks up and across a checkpoint folder need.
func TestFSPaths(t *testing.T) {
	for _, c := range []struct{ p, dir, base string }{
		{"fs:///model.pt", "fs:///", "model.pt"},
		{"fs:///hf/m/config.json", "fs:///hf/m", "config.json"},
		{"fs:///hf", "fs:///", "hf"},
		{"fs:///", "fs:///", "."},
		{"gs://bucket/run/x", "gs://bucket/run", "x"},
		{"gs://bucket", "gs://bucket", "bucket"},
	} {
		if got := storage.Dir(c.p); got != c.dir {
			t.Errorf("Dir(%q) = %q, want %q", c.p, got, c.dir)
		}
		if got := storage.Base(c.p); got != c.base {
			t.Errorf("Base(%q) = %q, want %q", c.p, got, c.base)
		}
	}
	if got := storage.Join(storage.FSPath("."), "config.json"); got != "fs:///config.json" {
		t.Errorf("Join at the root: %q", got)
	}
	if got := storage.Join(storage.FSPath("m"), "../../../etc/passwd"); got != "fs:///etc/passwd" {
		t.Errorf("Join leaving the root: %q", got)
	}
}

// A backend given with WithBackend serves its context's calls only; every storage
// function reads through it, names are confined to the fs.FS, errors name the full path,
// and only regular files open.
func TestWithBackend(t *testing.T) {
	fsys := fstest.MapFS{
		"m/config.json":       {Data: []byte(`{"a":1}`)},
		"m/model.safetensors": {Data: []byte("0123456789")},
		"m/pipe":              {Mode: fs.ModeNamedPipe},
	}
	bg := context.Background()
	ctx := storage.WithBackend(bg, storage.FSScheme, storage.FromFS(fsys))
	if _, err := storage.Stat(bg, "fs:///m"); !errors.Is(err, storage.ErrNoBackend) {
		t.Errorf("another context sees the backend: %v", err)
	}
	if st, err := storage.Stat(ctx, "fs:///m"); err != nil || !st.IsDir() {
		t.Errorf("Stat folder: %v %v", st, err)
	}
	b, err := storage.ReadFile(ctx, "fs:///m/config.json", 100)
	if string(b) != `{"a":1}` || err != nil {
		t.Errorf("ReadFile: %q %v", b, err)
	}
	if _, err := storage.ReadFile(ctx, "fs:///m/model.safetensors", 5); err == nil {
		t.Errorf("ReadFile past its limit")
	}
	if got := storage.Glob(ctx, "fs:///m", "*.json"); len(got) != 1 || got[0] != "fs:///m/config.json" {
		t.Errorf("Glob: %q", got)
	}
	var walked []string
	storage.WalkDir(ctx, "fs:///", func(p string, d fs.DirEntry, err error) error {
		walked = append(walked, p)
		return err
	})
	if strings.Join(walked, " ") != "fs:/// fs:///m fs:///m/config.json fs:///m/model.safetensors fs:///m/pipe" {
		t.Errorf("WalkDir: %q", walked)
	}
	f, err := storage.Open(ctx, "fs:///m/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := storage.ReadRange(f, 2, 3); string(r) != "234" || err != nil || f.Size() != 10 {
		t.Errorf("ReadRange: %q %v, size %d", r, err, f.Size())
	}
	f.Close()
	if _, err := storage.Open(ctx, "fs:///m/pipe"); err == nil || !strings.Contains(err.Error(), "fs:///m/pipe") {
		t.Errorf("a named pipe opened: %v", err)
	}
	if _, err := storage.Open(ctx, "fs:///m/absent"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "fs:///m/absent") {
		t.Errorf("missing file: %v", err)
	}
	for _, p := range []string{"fs:///m/../m/config.json", "fs:///m//config.json", "fs:///./m"} {
		if _, err := storage.Open(ctx, p); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q): %v, want fs.ErrInvalid", p, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	f, _ = storage.Open(cctx, "fs:///m/model.safetensors")
	cancel()
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v", err)
	}
}

// FromReaderAt holds one file, never reading r past size.
func TestFromReaderAt(t *testing.T) {
	ctx := storage.WithBackend(context.Background(), storage.FSScheme, storage.FromReaderAt("w.pt", bytes.NewReader([]byte("abcdefgh")), 5))
	f, err := storage.Open(ctx, "fs:///w.pt")
	if err != nil || f.Size() != 5 {
		t.Fatalf("%v, size %v", err, f)
	}
	buf := make([]byte, 8)
	if n, err := f.ReadAt(buf, 0); n != 5 || !errors.Is(err, io.EOF) {
		t.Errorf("read past size: %d %v", n, err)
	}
	if entries, err := storage.ReadDir(ctx, storage.Dir("fs:///w.pt")); err != nil || len(entries) != 1 || entries[0].Name() != "w.pt" {
		t.Errorf("ReadDir: %v %v", entries, err)
	}
	if _, err := storage.Open(ctx, "fs:///other.pt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("another file: %v", err)
	}
}
