package sink

import (
	"fmt"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Target is the statedict.Output a layout's writer is given: an output as a whole, or one
// file of a folder output as a single-file output of its own (a training-state file
// converted alongside a folder's weights). No file is created twice.
type Target struct {
	out  storage.Output
	dst  string
	file string // "" for the output itself
	seen *created
}

type created struct {
	mu    sync.Mutex
	names map[string]bool
}

// NewTarget is out, whose final path is dst, as a statedict.Output.
func NewTarget(out storage.Output, dst string) *Target {
	return &Target{out: out, dst: dst, seen: &created{names: map[string]bool{}}}
}

// Sub is the file name of this folder output as a single-file output of its own.
func (t *Target) Sub(name string) *Target {
	return &Target{out: t.out, dst: t.dst, file: name, seen: t.seen}
}

// File is the file of the folder output this target is, "" for the output itself.
func (t *Target) File() string { return t.file }

// Create implements statedict.Output.
func (t *Target) Create(name string) (io.WriteCloser, error) {
	if t.file != "" {
		if name != "" {
			return nil, fmt.Errorf("%s: a single-file output cannot hold %s", t.Name(), name)
		}
		name = t.file
	}
	return t.CreateFile(name)
}

// CreateFile starts the file name of the whole output (a manifest beside a file of it).
func (t *Target) CreateFile(name string) (io.WriteCloser, error) {
	t.seen.mu.Lock()
	twice := t.seen.names[name]
	t.seen.names[name] = true
	t.seen.mu.Unlock()
	if twice {
		return nil, fmt.Errorf("%s: %s written twice", t.dst, name)
	}
	return t.out.Create(name)
}

// Name implements statedict.Output: the output's final path, or its file's.
func (t *Target) Name() string {
	if t.file != "" {
		return storage.Join(t.dst, t.file)
	}
	return t.dst
}

var _ statedict.Output = (*Target)(nil)
