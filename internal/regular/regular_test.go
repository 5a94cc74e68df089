package regular

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/fifotest"
)

// TestReadFile: a regular file within its bound is read; a FIFO (with no writer: an open
// for reading would wait forever), a link to one, /dev/zero, a folder and a file past the
// bound are refused at once, naming the path and the kind, never the content.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	os.WriteFile(p("ok.json"), []byte(`{"a":1}`), 0o644)
	os.WriteFile(p("big"), []byte("SECRET-CONTENT-"+strings.Repeat("x", 100)), 0o644)
	fifotest.Make(t, p("fifo"))
	os.Symlink(p("fifo"), p("link-to-fifo"))
	os.Symlink("/dev/zero", p("zero"))
	os.Mkdir(p("folder"), 0o755)
	os.Symlink(p("ok.json"), p("link-to-ok"))
	for _, c := range []struct {
		name string
		want string // "" for a read
		err  error
	}{
		{"ok.json", "", nil},
		{"link-to-ok", "", nil},
		{"big", "more than 16", ErrTooLarge},
		{"fifo", "a FIFO", ErrNotRegular},
		{"link-to-fifo", "a FIFO", ErrNotRegular},
		{"zero", "a character device", ErrNotRegular},
		{"folder", "a folder", ErrNotRegular},
		{"missing", "no such file", os.ErrNotExist},
	} {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() {
			b, err = ReadFile(p(c.name), 16+int64(len(`{"a":1}`))-7)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the read hung", c.name)
		}
		if c.err == nil {
			if err != nil || string(b) != `{"a":1}` {
				t.Errorf("%s: %q, %v", c.name, b, err)
			}
			continue
		}
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v, want %v naming it and %q", c.name, err, c.err, c.want)
		}
	}
	if _, err := ReadFile(p("ok.json"), -1); err == nil {
		t.Error("an unbounded read was allowed")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if f, _, err := OpenIn(root, "fifo"); !errors.Is(err, ErrNotRegular) {
		if err == nil {
			f.Close()
		}
		t.Errorf("OpenIn of a FIFO: %v", err)
	}
	f, st, err := OpenIn(root, "ok.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := read(f, st, "ok.json", 100); err != nil || string(b) != `{"a":1}` {
		t.Errorf("OpenIn: %q %v", b, err)
	}
}
