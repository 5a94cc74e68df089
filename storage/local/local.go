// Package local writes outputs on the local file system as storage.Output and
// storage.SharedOutput, over internal/atomicfile: a folder, a single file with its
// companions (its manifest) beside it, or one host's share of a folder several hosts write
// on a file system they all mount. Nothing appears under its final name until the output
// commits; a killed run's leftovers are resumed or removed, and nothing ckpt did not write
// is ever touched (atomicfile). Files are written through internal/fastcopy, reading file
// ranges with pread, and each file's size and xxhash64 are computed as it is written: a
// folder journals them (so a resumed run keeps the file), a file output keeps them for its
// manifest (storage.FileSums).
//
// It registers itself with storage (storage.RegisterLocal), as storage/bucket registers
// gs:// and s3://, so that storage.CreateOutput and storage.JoinOutput take local paths. It
// lives apart from storage's local reader because fastcopy writes statedict ranges, and
// statedict imports storage.
package local

import (
	"context"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/storage"
)

func init() { storage.RegisterLocal(outputs{}) }

// outputs is the storage.LocalOutputs this package registers.
type outputs struct{}

// CreateOutput starts the output path: a folder (opts.Folder) or a file, whose companions
// (opts.Companions: names appended to its own) are written beside it and committed after
// it. An existing destination is replaced only with opts.Force and when opts.Proof proves
// every file of it an earlier output's.
func (outputs) CreateOutput(ctx context.Context, path string, opts storage.OutputOptions) (storage.Output, error) {
	owner := ownerOf(ctx, path, opts)
	if opts.Folder {
		d, err := atomicfile.CreateDir(ctx, path, atomicfile.DirOptions{Force: opts.Force, Owner: owner})
		if err != nil {
			return nil, err
		}
		return &folder{ctx: ctx, d: d, dst: path}, nil
	}
	return createFile(ctx, path, atomicfile.FileOptions{Force: opts.Force, Owner: owner}, opts.Companions)
}

// JoinOutput starts host opts.Host's share of the folder path written by opts.Hosts hosts
// (atomicfile.JoinDir); as host 0 of 1, a single process's folder (atomicfile.CreateDir),
// whose killed run's files are kept with opts.Resume. Run and Wait are for outputs that
// share no file system (a bucket's): here the partial folder's lock and journals play
// their part.
func (outputs) JoinOutput(ctx context.Context, path string, opts storage.SharedOptions) (storage.SharedOutput, error) {
	do := atomicfile.DirOptions{Force: opts.Force, Owner: ownerOf(ctx, path, opts.OutputOptions), Resume: opts.Resume}
	var d *atomicfile.Dir
	var err error
	if opts.Hosts <= 1 {
		d, err = atomicfile.CreateDir(ctx, path, do)
	} else {
		d, err = atomicfile.JoinDir(ctx, path, do, opts.Host, opts.Hosts)
	}
	if err != nil {
		return nil, err
	}
	return &folder{ctx: ctx, d: d, dst: path, member: opts.Hosts > 1}, nil
}

// ownerOf proves what an earlier output at dst wrote, from opts.Proof; without one,
// atomicfile's rule for outputs that carry no record applies (a folder proves nothing, a
// file any regular file).
func ownerOf(ctx context.Context, dst string, opts storage.OutputOptions) atomicfile.Owner {
	if opts.Proof == nil {
		return nil
	}
	return func(string) ([]atomicfile.Journaled, bool) { return opts.Proof(ctx, dst) }
}
