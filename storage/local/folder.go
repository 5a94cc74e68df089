package local

import (
	"context"
	"fmt"
	"io"
	"io/fs"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/storage"
)

// folder is a folder output (atomicfile.Dir): a single process's, or one host's share of
// a shared folder (member).
type folder struct {
	// ctx is the output's, given to CreateOutput or JoinOutput: storage.Output's methods
	// take none (a bucket's output keeps its own the same way).
	ctx    context.Context
	d      *atomicfile.Dir
	dst    string
	member bool
}

// Create starts the file name of the folder. Once closed it is durable and journaled with
// its size and xxhash64, so that a resumed run keeps it.
func (o *folder) Create(name string) (io.WriteCloser, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("%s: %q is not a file name inside the output folder", o.dst, name)
	}
	f, err := o.d.Create(name)
	if err != nil {
		return nil, err
	}
	return newWriter(f, true, func(sum storage.Finished) error {
		// Durable before it is journaled: a resumed run keeps only what is on disk.
		if err := f.Sync(); err != nil {
			return err
		}
		sum.File = name
		return o.d.Finished(sum)
	}), nil
}

// Commit writes last, then moves the folder into place (a shared folder's finisher: once
// every host's share is proven; see atomicfile).
func (o *folder) Commit(last []storage.NamedBytes) error {
	for _, nb := range last {
		if err := writeWhole(o, nb); err != nil {
			return err
		}
	}
	return o.d.Commit(o.ctx)
}

// writeWhole writes the file nb of out.
func writeWhole(out storage.Output, nb storage.NamedBytes) error {
	w, err := out.Create(nb.Name)
	if err != nil {
		return err
	}
	_, err = w.Write(nb.Data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// Abort removes what this output wrote (a host's unsealed files; nothing after Commit).
func (o *folder) Abort() { o.d.Abort() }

func (o *folder) Sealed() ([]byte, bool)               { return o.d.Sealed() }
func (o *folder) Unseal() error                        { return o.d.Unseal(o.ctx) }
func (o *folder) Seal(part []byte) error               { return o.d.Seal(o.ctx, part) }
func (o *folder) Parts() ([][]byte, error)             { return o.d.Parts(o.ctx) }
func (o *folder) Resumed() map[string]storage.Finished { return o.d.Resumed }
func (o *folder) CleanedUp() bool                      { return o.d.CleanedUp }

// Sums implements storage.FileSums: this run's files, the resumed ones and, for a shared
// folder's finisher, every host's.
func (o *folder) Sums() (map[string]storage.Finished, error) { return o.d.Sums() }

// Staged implements storage.Staged: the partial folder — for a shared folder's finisher,
// once every entry there is proven a host's (atomicfile's Verify).
func (o *folder) Staged() (string, error) {
	if o.member {
		if err := o.d.Verify(o.ctx); err != nil {
			return "", err
		}
	}
	return o.d.Path, nil
}

// Open implements storage.Reopener.
func (o *folder) Open(name string) (io.ReadCloser, error) { return o.d.Open(name) }

var (
	_ storage.SharedOutput = (*folder)(nil)
	_ storage.FileSums     = (*folder)(nil)
	_ storage.Staged       = (*folder)(nil)
	_ storage.Reopener     = (*folder)(nil)
)
