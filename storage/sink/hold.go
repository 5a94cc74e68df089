package sink

import (
	"bytes"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/storage"
)

// Hold is an output whose files meant to be written last (its manifests — the output's,
// whose presence means the output is complete, and those of its files) are held in memory and given to Commit, which writes them after
// every other, in the order they were closed — for an output whose files appear as they
// are written (a bucket's). Over a storage.Staged output, whose files all appear when it
// commits, they are written as any other (streamed, never all in memory).
type Hold struct {
	out      storage.Output
	manifest string
	now      bool // out is Staged: nothing is held

	mu   sync.Mutex
	held []storage.NamedBytes
}

// NewHold wraps out, whose manifests are named manifest (storage.OutputOptions.Manifest;
// see IsManifest).
func NewHold(out storage.Output, manifest string) *Hold {
	_, staged := storage.As[storage.Staged](out)
	return &Hold{out: out, manifest: manifest, now: staged}
}

// Create starts the file name, held until Commit when it is one to write last.
func (h *Hold) Create(name string) (io.WriteCloser, error) {
	if h.now || !IsManifest(name, h.manifest) {
		return h.out.Create(name)
	}
	return &held{h: h, name: name}, nil
}

// Commit writes the files held, then last, after every other.
func (h *Hold) Commit(last []storage.NamedBytes) error {
	h.mu.Lock()
	all := append(h.held[:len(h.held):len(h.held)], last...)
	h.mu.Unlock()
	return h.out.Commit(all)
}

func (h *Hold) Abort()                 { h.out.Abort() }
func (h *Hold) Unwrap() storage.Output { return h.out }

type held struct {
	h    *Hold
	name string
	buf  bytes.Buffer
}

func (w *held) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *held) Close() error {
	w.h.mu.Lock()
	w.h.held = append(w.h.held, storage.NamedBytes{Name: w.name, Data: w.buf.Bytes()})
	w.h.mu.Unlock()
	return nil
}
