package storage

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// The optional abilities of an Output, found with As through the Unwrap chain of the
// decorators around it (storage/sink), so that a decorated output keeps them.

// Leftovers is an output that looked for what an interrupted run of it left at its
// destination: Resumed lists the files that run finished and this one keeps (with their
// journaled size and xxhash64; nil when none are kept), CleanedUp reports that it removed
// what that run left instead. A SharedOutput is one.
type Leftovers interface {
	Resumed() map[string]Finished
	CleanedUp() bool
}

// FileSums is an output that records each file it finished with its size and xxhash64 —
// a local output, which journals them — for the manifest (a file output: its own file, by
// base name; a shared folder's finisher: every host's files).
type FileSums interface {
	Sums() (map[string]Finished, error)
}

// Staged is an output whose files are written under a temporary name and appear in place
// together when it commits (a local output, renamed into place): a file it creates, however
// late, appears no earlier than Commit, so the files meant to be written last (a manifest)
// need not be held back for Commit. Staged returns where the output is while it is
// written, for reading it back before it commits — for the finisher of a shared output,
// once every entry there is proven a host's.
type Staged interface {
	Staged() (string, error)
}

// Reopener is an output whose finished files can be read back (a resumed local file, to
// check it against its journal): only a file the output proves it made, never through a
// link.
type Reopener interface {
	Open(name string) (io.ReadCloser, error)
}

// LocalOutputs writes outputs on the local file system: storage/local, which registers
// itself (RegisterLocal) so that CreateOutput and JoinOutput take local paths too.
type LocalOutputs interface {
	Creator
	SharedCreator
}

var (
	localMu  sync.RWMutex
	localOut LocalOutputs
)

// RegisterLocal makes c the writer of outputs at local paths (storage/local's init).
func RegisterLocal(c LocalOutputs) {
	localMu.Lock()
	defer localMu.Unlock()
	localOut = c
}

// CreateOutput starts a local output through the registered LocalOutputs; it is tracked
// by internal/atomicfile (RemovePending), not by AbortPending.
func (local) CreateOutput(ctx context.Context, url string, opts OutputOptions) (Output, error) {
	c, err := localOutputs(url)
	if err != nil {
		return nil, err
	}
	return c.CreateOutput(ctx, url, opts)
}

// JoinOutput starts a local shared output through the registered LocalOutputs.
func (local) JoinOutput(ctx context.Context, url string, opts SharedOptions) (SharedOutput, error) {
	c, err := localOutputs(url)
	if err != nil {
		return nil, err
	}
	return c.JoinOutput(ctx, url, opts)
}

func localOutputs(url string) (LocalOutputs, error) {
	localMu.RLock()
	defer localMu.RUnlock()
	if localOut == nil {
		return nil, fmt.Errorf("%s: %w: no local output writer is linked into this program (import github.com/ckpt-dev/ckpt/storage/local)", url, ckpterr.ErrUnsupported)
	}
	return localOut, nil
}
