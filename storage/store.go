// Package storage is where checkpoint readers get their files from: the local file system
// (files memory-mapped, as before) or, for a path with a scheme — gs://bucket/prefix,
// s3://bucket/prefix — a backend registered for that scheme. Readers work over [File], an
// io.ReaderAt with a size, so no format package learns about buckets; a local file also
// offers its mapping ([Mapped]) and readers keep their zero-copy fast path for it.
//
// Backends are registered by the packages that implement them (as database/sql drivers
// are): importing github.com/ckpt-dev/ckpt/storage/bucket registers gs:// and s3://,
// so a program that never imports it never links a cloud SDK.
// A backend can also be given for one call tree rather than the program: [WithBackend]
// puts it in the context, as formats.OpenFS does with [FromFS] (an fs.FS read at
// fs:/// paths) so every reader opens its siblings through the caller's fs.FS.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckpt-dev/ckpt/internal/mmap"
	"github.com/ckpt-dev/ckpt/internal/regular"
)

// File is an open file or object: random access to its bytes, and its size. Reads past
// the end return io.EOF as io.ReaderAt says. A remote file's reads are cancelled with the
// context it was opened with (io.ReaderAt takes none).
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Mapped is a File whose whole content is in memory (a local file's mapping): readers
// slice it instead of reading.
type Mapped interface {
	Bytes() []byte
}

// FS is a backend for the paths of one scheme. Every name is a full path as the user wrote
// it ("gs://bucket/run/step-1000/.metadata"); folders are prefixes of names. Every call
// takes the context that cancels it.
type FS interface {
	// Open opens the file or object name for reading; ctx also cancels the File's reads.
	Open(ctx context.Context, name string) (File, error)
	// Stat describes name: a file (object), or a folder when objects lie under name + "/".
	// A missing name is an error satisfying errors.Is(err, fs.ErrNotExist).
	Stat(ctx context.Context, name string) (fs.FileInfo, error)
	// ReadDir lists the folder name: its files and subfolders, sorted by name.
	ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error)
}

var (
	mu       sync.RWMutex
	backends = map[string]FS{}
)

// Register makes fsys the backend for paths beginning with scheme + "://".
func Register(scheme string, fsys FS) {
	mu.Lock()
	defer mu.Unlock()
	backends[scheme] = fsys
}

// Scheme returns the scheme of a URL path ("gs" for gs://b/k) and whether p is one. A
// local path — also one containing "://" after a slash — has none.
func Scheme(p string) (string, bool) {
	i := strings.Index(p, "://")
	if i <= 0 {
		return "", false
	}
	for _, c := range p[:i] {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return "", false
		}
	}
	return p[:i], true
}

// IsRemote reports whether p names a file of a backend rather than the local file system.
func IsRemote(p string) bool {
	_, ok := Scheme(p)
	return ok
}

// ErrNoBackend is returned for a URL whose scheme has no registered backend.
var ErrNoBackend = errors.New("no storage backend for this scheme is linked into this program")

// backend returns the FS for p: the one ctx carries for its scheme (WithBackend), else the
// one registered for it.
func backend(ctx context.Context, p string) (FS, error) {
	s, ok := Scheme(p)
	if !ok {
		return local{}, nil
	}
	if b, ok := ctx.Value(backendKey{s}).(FS); ok {
		return b, nil
	}
	mu.RLock()
	b := backends[s]
	mu.RUnlock()
	if b == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("%w (import github.com/ckpt-dev/ckpt/storage/bucket for gs:// and s3://)", ErrNoBackend)}
	}
	return b, nil
}

// Open opens p for reading: a local file is memory-mapped (the File is also Mapped).
func Open(ctx context.Context, p string) (File, error) {
	b, err := backend(ctx, p)
	if err != nil {
		return nil, err
	}
	return b.Open(ctx, p)
}

// Stat describes p.
func Stat(ctx context.Context, p string) (fs.FileInfo, error) {
	b, err := backend(ctx, p)
	if err != nil {
		return nil, err
	}
	return b.Stat(ctx, p)
}

// ReadDir lists the folder p.
func ReadDir(ctx context.Context, p string) ([]fs.DirEntry, error) {
	b, err := backend(ctx, p)
	if err != nil {
		return nil, err
	}
	return b.ReadDir(ctx, p)
}

// IsFile reports whether p is a regular file (a local symbolic link counts as what it
// leads to).
func IsFile(ctx context.Context, p string) bool {
	st, err := Stat(ctx, p)
	return err == nil && st.Mode().IsRegular()
}

// ReadFile reads the whole of p, refusing files larger than limit bytes, so that a small
// metadata file that turns out huge cannot exhaust memory. A local file goes through
// regular.ReadFile: a regular file only (not a FIFO, device or folder, even through a
// link), never waited on.
func ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("store: %s: a read needs a bound", p)
	}
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	if !IsRemote(p) {
		return regular.ReadFile(p, limit)
	}
	f, err := Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d this file may have", p, f.Size(), limit)
	}
	if m, ok := As[Mapped](f); ok {
		return append([]byte(nil), m.Bytes()...), nil
	}
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, err
	}
	return b, nil
}

// Join joins a folder path and slash-separated names: filepath.Join for local paths, a
// URL path join (keeping the scheme's "//") for remote ones.
func Join(dir string, elem ...string) string {
	if !IsRemote(dir) {
		parts := append([]string{dir}, elem...)
		for i := 1; i < len(parts); i++ {
			parts[i] = filepath.FromSlash(parts[i])
		}
		return filepath.Join(parts...)
	}
	s, _ := Scheme(dir)
	rest := path.Join(append([]string{strings.TrimPrefix(dir, s+"://")}, elem...)...)
	return s + "://" + rest
}

// Dir is the folder holding p (filepath.Dir for local paths).
func Dir(p string) string {
	if !IsRemote(p) {
		return filepath.Dir(p)
	}
	s, _ := Scheme(p)
	rest := strings.TrimSuffix(strings.TrimPrefix(p, s+"://"), "/")
	if i := strings.LastIndexByte(rest, '/'); i > 0 {
		return s + "://" + rest[:i]
	} else if i == 0 || rest == "" { // a path without a host: fs:///name is in fs:///
		return s + ":///"
	}
	return s + "://" + rest
}

// Base is the last element of p (filepath.Base for local paths).
func Base(p string) string {
	if !IsRemote(p) {
		return filepath.Base(p)
	}
	s, _ := Scheme(p)
	return path.Base(strings.TrimSuffix(strings.TrimPrefix(p, s+"://"), "/"))
}

// Glob returns the names in folder dir matching the path.Match pattern, as full paths.
func Glob(ctx context.Context, dir, pattern string) []string {
	if !IsRemote(dir) {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		return m
	}
	entries, err := ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if ok, _ := path.Match(pattern, e.Name()); ok {
			out = append(out, Join(dir, e.Name()))
		}
	}
	return out
}

// WalkDir walks the tree at root as filepath.WalkDir does (local paths go to it).
func WalkDir(ctx context.Context, root string, fn fs.WalkDirFunc) error {
	if !IsRemote(root) {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return fn(p, d, err)
		})
	}
	st, err := Stat(ctx, root)
	if err != nil {
		return fn(root, nil, err)
	}
	err = walk(ctx, root, fs.FileInfoToDirEntry(st), fn)
	if errors.Is(err, fs.SkipDir) || errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func walk(ctx context.Context, p string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(p, d, nil); err != nil || !d.IsDir() {
		if errors.Is(err, fs.SkipDir) && d.IsDir() {
			return nil
		}
		return err
	}
	entries, err := ReadDir(ctx, p)
	if err != nil {
		return fn(p, d, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := walk(ctx, Join(p, e.Name()), e, fn); err != nil {
			if errors.Is(err, fs.SkipDir) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Sub is the folder dir as an fs.FS (slash-separated names relative to it), for the
// extra files of a remote checkpoint folder (config.json, tokenizer files); ctx cancels its
// opens and reads.
func Sub(ctx context.Context, dir string) fs.FS { return subFS{ctx, dir} }

type subFS struct {
	ctx context.Context
	dir string
}

func (s subFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	p := Join(s.dir, name)
	f, err := Open(s.ctx, p)
	if err != nil {
		return nil, err
	}
	return &sectionFile{File: f, r: io.NewSectionReader(f, 0, f.Size()), name: path.Base(name)}, nil
}

// sectionFile reads a File sequentially as an fs.File.
type sectionFile struct {
	File
	r    *io.SectionReader
	name string
}

func (f *sectionFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *sectionFile) Stat() (fs.FileInfo, error) {
	return fileInfo{name: f.name, size: f.Size()}, nil
}

// FileInfo describes a remote file or folder; backends return it from Stat.
func FileInfo(name string, size int64, dir bool) fs.FileInfo {
	return fileInfo{name: name, size: size, dir: dir}
}

type fileInfo struct {
	name string
	size int64
	dir  bool
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return i.size }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }

// local is the local file system: files are memory-mapped, or read with pread when the
// process has no address space left to map them (under ulimit -v the Go runtime reserves
// most of it) or the mapping would take what the heap counts on (mapFits).
type local struct{}

func (local) Open(ctx context.Context, name string) (File, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() && !mapFits(st.Size()) {
		return openUnmapped(name)
	}
	f, err := mmap.Open(name)
	if errors.Is(err, syscall.ENOMEM) {
		return openUnmapped(name)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// unmapped is a local file read with pread: not Mapped.
type unmapped struct {
	*os.File
	size int64
}

func (u unmapped) Size() int64 { return u.size }

func openUnmapped(name string) (File, error) {
	f, st, err := regular.Open(name)
	if err != nil {
		return nil, err
	}
	return unmapped{f, st.Size()}, nil
}
func (local) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return os.Stat(name)
}

func (local) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return os.ReadDir(name)
}

// Bytes returns the in-memory content of r when it is Mapped.
func Bytes(r io.ReaderAt) ([]byte, bool) {
	if m, ok := As[Mapped](r); ok {
		return m.Bytes(), true
	}
	return nil, false
}

// ReadRange returns the n bytes of r at off: a zero-copy slice when r is Mapped, else a
// copy read from r. A range past the end is an io.ErrUnexpectedEOF.
func ReadRange(r io.ReaderAt, off, n int64) ([]byte, error) {
	if d, ok := Bytes(r); ok {
		if off < 0 || n < 0 || off > int64(len(d)) || n > int64(len(d))-off {
			return nil, io.ErrUnexpectedEOF
		}
		return d[off : off+n], nil
	}
	b := make([]byte, n)
	m, err := r.ReadAt(b, off)
	if m == len(b) {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, err
}

// FromBytes is b as a Mapped File (Close does nothing).
func FromBytes(b []byte) File { return memFile(b) }

type memFile []byte

func (m memFile) Bytes() []byte { return m }
func (m memFile) Size() int64   { return int64(len(m)) }
func (m memFile) Close() error  { return nil }
func (m memFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m)) {
		return 0, io.EOF
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
