package formats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// OpenFile reads the single-file checkpoint held in r's first size bytes — a torch.save
// file (zip, legacy stream or tar), a safetensors file or a .nemo archive, recognized by
// content as [Open] recognizes them — as archive/zip.NewReader and debug/elf.NewFile read
// from any io.ReaderAt. name is the file's name (its base is kept: "model.safetensors"),
// used in messages, which name the file as fs:///name, and by readers that look at
// names (a DeepSpeed "*_model_states.pt"). Bytes of r past size are never read. r must
// stay readable until the checkpoint is closed: tensors read their bytes from it
// lazily, through ReadAt calls that may run in parallel. A folder checkpoint's file (a
// Hugging Face index, DCP's .metadata) or a file that is only part of a checkpoint (a
// ZeRO-3 rank's model states) is refused, saying so: its siblings are not there; give
// the folder to [OpenFS].
func OpenFile(ctx context.Context, r io.ReaderAt, size int64, name string) (*statedict.Checkpoint, error) {
	base := path.Base(filepath.ToSlash(name))
	if name == "" || base == "/" || base == "." || base == ".." {
		base = "checkpoint"
	}
	p := storage.FSPath(base)
	if size < 0 {
		return nil, fmt.Errorf("%s: %w: size %d is negative", p, ckpterr.ErrCorrupt, size)
	}
	ctx = storage.WithBackend(ctx, storage.FSScheme, storage.FromReaderAt(base, r, size))
	ck, err := OpenWith(ctx, p, OpenOptions{})
	if errors.Is(err, errUnrecognized) {
		return nil, fmt.Errorf("%w; OpenFile reads single-file checkpoints: if this is a file of a folder checkpoint (a Hugging Face index, DCP's .metadata or a .distcp file), read the folder with OpenFS", err)
	}
	return ck, err
}

// OpenFS reads the checkpoint name in fsys, a file or a folder, in any format [Open]
// reads: torch.save files, safetensors, Hugging Face folders (sharded included), DCP,
// Lightning, DeepSpeed, NeMo and Megatron layouts. name is an fs.ValidPath name ("." for
// fsys's root); the readers open every sibling they need through fsys, never outside it,
// and messages name files as fs:///name. Files are read through their ReadAt (os.DirFS,
// embed.FS and fstest.MapFS files have one; a file without one is read into memory only
// when it is at most storage.MaxWithoutReaderAt bytes, else refused with
// storage.ErrNoReaderAt). fsys must stay readable until the checkpoint is closed; ctx,
// kept by the checkpoint, also ends its reads.
func OpenFS(ctx context.Context, fsys fs.FS, name string) (*statedict.Checkpoint, error) {
	return OpenFSWith(ctx, fsys, name, OpenOptions{})
}

// OpenFSWith is OpenFS with options, as [OpenWith] is [Open] with them.
func OpenFSWith(ctx context.Context, fsys fs.FS, name string, o OpenOptions) (*statedict.Checkpoint, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: not a name inside an fs.FS (slash-separated, no .. or leading /)", fs.ErrInvalid)}
	}
	ctx = storage.WithBackend(ctx, storage.FSScheme, storage.FromFS(fsys))
	return OpenWith(ctx, storage.FSPath(name), o)
}
