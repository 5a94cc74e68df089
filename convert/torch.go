package convert

import (
	"hash"

	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/internal/fastcopy"
	"github.com/ckpt-dev/ckpt/statedict"
)

// torch writes a torch.save zip file.
func (j *writeJob) torch() error {
	dst := j.opts.Dst
	f, err := atomicfile.Create(dst, j.opts.Force)
	if err != nil {
		return err
	}
	defer f.Abort()
	out := fastcopy.NewFile(f.File)
	n, err := torchzip.Write(j.progress(out), j.src.Root, torchzip.SaveOptions{ArchiveName: archiveName(dst),
		Sum: func(st *statedict.Storage) hash.Hash { return j.digest(st) }})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	j.sum.Bytes = n
	return j.commitFile(f, nil)
}
