package local

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/storage"
)

// file is a single-file output (atomicfile.File) with its companions beside it (its
// manifest: path + companion), committed together, the file first, so that a companion's
// presence means the file is complete.
type file struct {
	dst        string
	f          *atomicfile.File
	companions []string
	cf         []*atomicfile.File // by companion
	// sum is the file's size and xxhash64 once written.
	sum *storage.Finished
}

func createFile(ctx context.Context, path string, fo atomicfile.FileOptions, companions []string) (*file, error) {
	f, err := atomicfile.Create(ctx, path, fo)
	if err != nil {
		return nil, err
	}
	o := &file{dst: path, f: f, companions: companions}
	for _, c := range companions {
		cf, err := atomicfile.Create(ctx, path+c, fo)
		if err != nil {
			o.Abort()
			return nil, err
		}
		o.cf = append(o.cf, cf)
	}
	return o, nil
}

// Create starts the file itself ("") or one of its companions.
func (o *file) Create(name string) (io.WriteCloser, error) {
	if name == "" {
		return newWriter(o.f.File, false, func(sum storage.Finished) error {
			sum.File = filepath.Base(o.dst)
			o.sum = &sum
			return nil
		}), nil
	}
	if i := slices.Index(o.companions, name); i >= 0 {
		return plain{o.cf[i]}, nil
	}
	return nil, fmt.Errorf("%s: a single-file output cannot hold %s", o.dst, name)
}

// Commit writes last (companions), then moves the file and its companions into place, the
// file first (atomicfile.CommitAll).
func (o *file) Commit(last []storage.NamedBytes) error {
	for _, nb := range last {
		if err := writeWhole(o, nb); err != nil {
			return err
		}
	}
	return atomicfile.CommitAll(append([]*atomicfile.File{o.f}, o.cf...)...)
}

// Abort removes the partial file and companions (nothing after Commit).
func (o *file) Abort() {
	o.f.Abort()
	for _, cf := range o.cf {
		cf.Abort()
	}
}

// Resumed implements storage.Leftovers: a file output is never resumed.
func (o *file) Resumed() map[string]storage.Finished { return nil }

// CleanedUp implements storage.Leftovers: the partial file of a killed run was removed.
func (o *file) CleanedUp() bool { return o.f.CleanedUp }

// Sums implements storage.FileSums: the file's size and digest once written.
func (o *file) Sums() (map[string]storage.Finished, error) {
	if o.sum == nil {
		return nil, nil
	}
	return map[string]storage.Finished{o.sum.File: *o.sum}, nil
}

// Staged implements storage.Staged: the partial file.
func (o *file) Staged() (string, error) { return o.f.Name(), nil }

var (
	_ storage.Leftovers = (*file)(nil)
	_ storage.FileSums  = (*file)(nil)
	_ storage.Staged    = (*file)(nil)
)
