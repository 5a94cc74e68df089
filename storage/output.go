package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Output is a conversion's output being written: in a bucket prefix, where files are
// streamed to their final names and each appears only once complete, or on the local file
// system (storage/local), where they appear together when it commits. The files given to
// Commit are written after every other, so their presence means the output is complete
// (ckpt puts its manifest there). Abort stops the writes in flight and removes the files
// this output made — never anything else. Optional abilities (outputcap.go) are found with
// As, through the decorators around it.
type Output interface {
	// Create starts the file name (slash-separated, relative to the output; "" for a
	// single-file output's own file). Close finishes and verifies it.
	Create(name string) (io.WriteCloser, error)
	// Commit writes last (name → content), in order of the names given, after every file
	// created has been closed.
	Commit(last []NamedBytes) error
	// Abort stops and removes what this output wrote.
	Abort()
}

// NamedBytes is a small file written whole.
type NamedBytes struct {
	Name string
	Data []byte
}

// OutputOptions say how an output may treat what is already at its destination.
type OutputOptions struct {
	// Folder: the URL names a folder (prefix) of files; else a single file, whose
	// companion files (its manifest) lie beside it with the file's name as prefix.
	Folder bool
	// Force replaces an earlier output: allowed only when Owned claims every object there.
	Force bool
	// Owned lists the files (relative to the destination folder) an earlier output at
	// dst claims through its manifest; ok is false when there is none.
	Owned func(ctx context.Context, dst string) (files []string, ok bool)
	// Companions are the names beside a single-file output that belong to it (its
	// manifest: "out.pt.ckpt-manifest.json").
	Companions []string
	// Manifest is the file name of the output's manifest ("ckpt-manifest.json"; a
	// single-file output's ends with it): an earlier output is removed manifest first, so
	// that nothing left while removing it looks complete.
	Manifest string
	// Proof, for a local output, lists what the earlier output at dst recorded of each
	// file it wrote — its size and xxhash64 (the manifest's Output.Sums) — and that record
	// itself (Size < 0, the manifest), for Force to replace only what is proven ckpt's;
	// ok is false when there is none.
	Proof func(ctx context.Context, dst string) (claims []Finished, ok bool)
}

// Creator is a backend that can also write outputs.
type Creator interface {
	CreateOutput(ctx context.Context, url string, opts OutputOptions) (Output, error)
}

// ErrExists is returned for a destination that holds an earlier output, which Force
// would replace.
var ErrExists = errors.New("destination exists")

// ErrForeign is returned for a destination an output may not be written to whatever the
// flags: it holds what ckpt did not write (or cannot prove it wrote), or another
// conversion is writing there.
var ErrForeign = errors.New("refusing a destination holding what ckpt did not write")

// CreateOutput starts an output at url through its backend.
func CreateOutput(ctx context.Context, url string, opts OutputOptions) (Output, error) {
	b, err := backend(ctx, url)
	if err != nil {
		return nil, err
	}
	c, ok := b.(Creator)
	if !ok {
		return nil, fmt.Errorf("%s: %w: this backend cannot write outputs", url, ckpterr.ErrUnsupported)
	}
	o, err := c.CreateOutput(ctx, url, opts)
	if err != nil || !IsRemote(url) { // a local output is internal/atomicfile's to track
		return o, err
	}
	t := &tracked{o}
	pendingMu.Lock()
	pending[t] = true
	pendingMu.Unlock()
	return t, nil
}

// pending are the outputs being written, for AbortPending.
var (
	pendingMu sync.Mutex
	pending   = map[*tracked]bool{}
)

// tracked is an Output registered in pending until it commits or aborts.
type tracked struct{ Output }

func (t *tracked) Commit(last []NamedBytes) error {
	err := t.Output.Commit(last)
	if err == nil {
		t.forget()
	}
	return err
}

func (t *tracked) Abort() {
	t.Output.Abort()
	t.forget()
}

func (t *tracked) forget() {
	pendingMu.Lock()
	delete(pending, t)
	pendingMu.Unlock()
}

// AbortPending aborts every output still being written (for a process about to exit on a
// signal, which runs no deferred cleanup) and returns how many there were.
func AbortPending() int {
	pendingMu.Lock()
	outs := make([]*tracked, 0, len(pending))
	for t := range pending {
		outs = append(outs, t)
	}
	pendingMu.Unlock()
	for _, t := range outs {
		t.Abort()
	}
	return len(outs)
}
