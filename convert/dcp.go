package convert

import (
	"hash"
	"io"

	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/statedict"
)

// dcp writes a torch.distributed.checkpoint directory. Its embedded archives are tagged
// "cpu", as torch's own DCP writer saves CPU copies: DCP loads bytes items with a plain
// torch.load and copies tensor chunks into the caller's tensors, wherever those live, so a
// device tag in the file could only make loading fail.
func (j *writeJob) dcp() error {
	d, err := atomicfile.CreateDir(j.opts.Dst, j.opts.Force, ownedFiles)
	if err != nil {
		return err
	}
	defer d.Abort()
	n, err := dcp.Write(d.Path, j.src.Root, dcp.WriteOptions{Location: cpuTag, Progress: func(w io.Writer) io.Writer { return j.progress(w) },
		Sum: func(t *statedict.Tensor) hash.Hash { return j.digest(t) }})
	if err != nil {
		return err
	}
	j.sum.Bytes = n
	j.sum.Files = []string{dcp.DataFile, dcp.MetadataFile}
	return j.commitDir(d, nil)
}

func cpuTag(*statedict.Storage) string { return "cpu" }
