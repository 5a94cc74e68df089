package convert

import (
	"hash"
	"io"

	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
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
	n, err := writeOut(f.File, func(w io.Writer) (int64, error) {
		return torchzip.Write(j.progress(w), j.src.Root, torchzip.SaveOptions{ArchiveName: archiveName(dst),
			Sum: func(st *statedict.Storage) hash.Hash { return j.digest(st) }})
	})
	if err != nil {
		return err
	}
	j.sum.Bytes = n
	return j.commitFile(f, nil)
}
