package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// FSScheme is the scheme of paths read from a backend given for one call rather than
// registered for the program ([WithBackend]): "fs:///" + the slash-separated name inside
// it ("fs:///hf/model/config.json"), as file:/// URLs name local files.
const FSScheme = "fs"

// FSPath is the full path of name (an fs.ValidPath name) in an [FSScheme] backend.
func FSPath(name string) string {
	if name == "." {
		return FSScheme + ":///"
	}
	return FSScheme + ":///" + name
}

type backendKey struct{ scheme string }

// WithBackend returns a context under which the paths of scheme are read from b ahead of
// any backend registered for it: a backend for one call tree (the fs.FS a caller hands to
// formats.OpenFS), never visible to other calls. Readers keep the context they were opened
// with, so files they open later come from b too.
func WithBackend(ctx context.Context, scheme string, b FS) context.Context {
	return context.WithValue(ctx, backendKey{scheme}, b)
}

// MaxWithoutReaderAt bounds the bytes read whole into memory from an fs.FS file that has no
// ReadAt: small files (configs, indexes, small checkpoints) are read; larger ones are
// refused with [ErrNoReaderAt] rather than held in memory.
const MaxWithoutReaderAt = 64 << 20

// ErrNoReaderAt is returned for a file of an fs.FS that has no ReadAt (io.ReaderAt) and is
// larger than [MaxWithoutReaderAt].
var ErrNoReaderAt = errors.New("the fs.FS's file has no ReadAt (io.ReaderAt) and is too large to read into memory")

// FromFS is fsys as a backend for [FSScheme] paths: "fs:///a/b" is fsys's "a/b". Every name
// is checked with fs.ValidPath, so reads stay inside fsys (as far as fsys itself keeps
// them: os.DirFS follows symbolic links out of its folder, an os.Root's FS does not).
// Files are read through their ReadAt; a file without one is read into memory when it
// is at most MaxWithoutReaderAt bytes, else refused. Only regular files are opened, so a FIFO
// in an os.DirFS is never waited on.
func FromFS(fsys fs.FS) FS { return ioFS{fsys} }

type ioFS struct{ fsys fs.FS }

// name maps the full path p to its name in fsys.
func (f ioFS) name(op, p string) (string, error) {
	rest, ok := strings.CutPrefix(p, FSScheme+"://")
	n := strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/")
	if n == "" {
		n = "."
	}
	if !ok || !fs.ValidPath(n) {
		return "", &fs.PathError{Op: op, Path: p, Err: fs.ErrInvalid}
	}
	return n, nil
}

func (f ioFS) Open(ctx context.Context, p string) (File, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	n, err := f.name("open", p)
	if err != nil {
		return nil, err
	}
	st, err := fs.Stat(f.fsys, n)
	if err != nil {
		return nil, relabel(err, p)
	}
	if !st.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
	}
	file, err := f.fsys.Open(n)
	if err != nil {
		return nil, relabel(err, p)
	}
	if st, err = file.Stat(); err != nil {
		file.Close()
		return nil, relabel(err, p)
	}
	if ra, ok := file.(io.ReaderAt); ok {
		return &fsFile{ctx: ctx, f: file, r: ra, size: st.Size()}, nil
	}
	defer file.Close()
	if st.Size() > MaxWithoutReaderAt {
		return nil, fmt.Errorf("%s: %w (%d bytes, more than the %d read whole)", p, ErrNoReaderAt, st.Size(), MaxWithoutReaderAt)
	}
	// The size Stat reports is not trusted: the read stops one byte past the bound.
	b, err := io.ReadAll(io.LimitReader(file, MaxWithoutReaderAt+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	if len(b) > MaxWithoutReaderAt {
		return nil, fmt.Errorf("%s: %w (more than the %d bytes read whole, though its Stat said %d)", p, ErrNoReaderAt, MaxWithoutReaderAt, st.Size())
	}
	return &fsFile{ctx: ctx, f: noClose{}, r: bytes.NewReader(b), size: int64(len(b))}, nil
}

func (f ioFS) Stat(ctx context.Context, p string) (fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	n, err := f.name("stat", p)
	if err != nil {
		return nil, err
	}
	st, err := fs.Stat(f.fsys, n)
	return st, relabel(err, p)
}

func (f ioFS) ReadDir(ctx context.Context, p string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: p, Err: err}
	}
	n, err := f.name("readdir", p)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(f.fsys, n)
	return entries, relabel(err, p)
}

// relabel names the full path in fsys's *fs.PathError (which names fsys's relative name),
// so messages say which checkpoint file failed as they do for every other backend.
func relabel(err error, p string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: p, Err: pe.Err}
	}
	return err
}

// noClose is the Closer of a file with nothing to release.
type noClose struct{}

func (noClose) Close() error { return nil }

// fsFile is a file of an fs.FS read through its ReadAt; its reads end once ctx does.
type fsFile struct {
	ctx  context.Context
	f    io.Closer
	r    io.ReaderAt
	size int64
}

func (f *fsFile) Size() int64  { return f.size }
func (f *fsFile) Close() error { return f.f.Close() }
func (f *fsFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.ctx.Err(); err != nil {
		return 0, err
	}
	return f.r.ReadAt(p, off)
}

// FromReaderAt is a backend holding one file, r's first size bytes, at the [FSScheme]
// path FSPath(name) (name is a base name: "model.safetensors"); its folder, FSPath("."),
// holds nothing else. Bytes of r past size are never read, as with io.NewSectionReader.
func FromReaderAt(name string, r io.ReaderAt, size int64) FS {
	return &oneFile{path: FSPath(name), r: io.NewSectionReader(r, 0, size)}
}

type oneFile struct {
	path string
	r    *io.SectionReader
}

func (o *oneFile) Open(ctx context.Context, p string) (File, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	if p != o.path {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return &fsFile{ctx: ctx, f: noClose{}, r: o.r, size: o.r.Size()}, nil
}

func (o *oneFile) Stat(ctx context.Context, p string) (fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	switch p {
	case o.path:
		return FileInfo(path.Base(o.path), o.r.Size(), false), nil
	case FSPath("."), Dir(o.path):
		return FileInfo(".", 0, true), nil
	}
	return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
}

func (o *oneFile) ReadDir(ctx context.Context, p string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: p, Err: err}
	}
	switch p {
	case FSPath("."), Dir(o.path):
		return []fs.DirEntry{fs.FileInfoToDirEntry(FileInfo(path.Base(o.path), o.r.Size(), false))}, nil
	}
	return nil, &fs.PathError{Op: "readdir", Path: p, Err: fs.ErrNotExist}
}
