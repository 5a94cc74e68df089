package storage_test

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// windowed is a remote object's stand-in: it can serve a window.
type windowed struct {
	*bytes.Reader
	windows atomic.Int64
}

func (w *windowed) Window(off, n int64) io.ReaderAt { w.windows.Add(1); return w }

// counting is a decorator: it counts what is read through it and gives the reader it
// wraps back through Unwrap.
type counting struct {
	r    io.ReaderAt
	read atomic.Int64
}

func (c *counting) ReadAt(p []byte, off int64) (int, error) {
	c.read.Add(int64(len(p)))
	return c.r.ReadAt(p, off)
}
func (c *counting) Unwrap() io.ReaderAt { return c.r }

// TestAsThroughDecorators: a capability of a reader stays discoverable through the
// decorators wrapping it — found by As, lost to a bare type assertion — and a tensor
// storage over a decorated object reads through the object's window as it does over the
// object itself.
func TestAsThroughDecorators(t *testing.T) {
	obj := &windowed{Reader: bytes.NewReader(make([]byte, 64))}
	var r io.ReaderAt = &counting{r: &counting{r: obj}}
	if _, ok := r.(statedict.Windower); ok {
		t.Fatal("the decorator itself is a Windower: the test proves nothing")
	}
	if w, ok := storage.As[statedict.Windower](r); !ok || w != statedict.Windower(obj) {
		t.Fatalf("As through two decorators: %v, %v", w, ok)
	}
	if _, ok := storage.As[storage.Mapped](r); ok {
		t.Fatal("As found a capability nothing in the chain has")
	}
	s := statedict.NewReaderStorage("0", "cpu", statedict.Float32, r, 16, 32)
	if obj.windows.Load() != 1 {
		t.Fatalf("a storage over the decorated object opened %d windows, want 1", obj.windows.Load())
	}
	if _, err := s.ReadAt(make([]byte, 32), 0); err != nil {
		t.Fatal(err)
	}
	// A mapped file keeps its zero-copy path through a decorator.
	m := storage.FromBytes([]byte("abc"))
	if b, ok := storage.Bytes(&counting{r: m}); !ok || string(b) != "abc" {
		t.Fatalf("Bytes through a decorator: %q, %v", b, ok)
	}
}
