//go:build !unix

package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// folder is a folder output's partial folder. Without openat and O_NOFOLLOW (systems other
// than unix), each name is checked with Lstat, component by component, before it is
// used: a link is never followed, though a change between the check and the use is not
// excluded as it is on unix (beneath_unix.go). Identities are kind, size and modification
// time; the inode is not available and stands at 1.
type folder struct {
	path string
	id   ident
	// lockf holds the partial folder's lock (see lock) while the folder is open.
	lockf *os.File
}

type ident struct {
	ino   uint64
	dev   uint64
	mode  fs.FileMode
	nlink uint64
	size  int64
	mtime int64
}

func (i ident) isReg() bool { return i.mode.IsRegular() }
func (i ident) isDir() bool { return i.mode.IsDir() }

func (i ident) kind() string {
	switch {
	case i.isReg():
		return "a file"
	case i.isDir():
		return "a folder"
	case i.mode&fs.ModeSymlink != 0:
		return "a link"
	case i.mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	}
	return "not a file"
}

func (i ident) sameFile(want ident) bool {
	return i.mode.Type() == want.mode.Type() && (!i.isReg() || (i.size == want.size && i.mtime == want.mtime))
}

func identInfo(st fs.FileInfo) ident {
	return ident{ino: 1, mode: st.Mode().Type(), nlink: 1, size: st.Size(), mtime: st.ModTime().UnixNano()}
}

func lstatPath(path string) (ident, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return ident{}, err
	}
	return identInfo(st), nil
}

func openFolder(path string, own bool) (*folder, error) {
	id, err := lstatPath(path)
	if err != nil {
		return nil, err
	}
	if !id.isDir() {
		return nil, fmt.Errorf("%s is not a folder (%s)", path, id.kind())
	}
	return &folder{path: path, id: id}, nil
}

func (fo *folder) close() {
	if fo.lockf != nil {
		fo.lockf.Close()
		fo.lockf = nil
	}
}

func checkName(name string) error {
	if !fs.ValidPath(name) || name == "." || strings.ContainsAny(name, `\:`) {
		return fmt.Errorf("%q is not a name inside the folder", name)
	}
	return nil
}

func (fo *folder) pathOf(name string) string { return filepath.Join(fo.path, filepath.FromSlash(name)) }

// checkWay refuses a link or non-folder on the way to name.
func (fo *folder) checkWay(name string, mkdir bool, made func(string, ident) error) error {
	if err := checkName(name); err != nil {
		return err
	}
	elems := strings.Split(name, "/")
	for i := range elems[:len(elems)-1] {
		rel := strings.Join(elems[:i+1], "/")
		id, err := lstatPath(fo.pathOf(rel))
		if errors.Is(err, os.ErrNotExist) && mkdir {
			if err = os.Mkdir(fo.pathOf(rel), 0o755); err == nil {
				if id, err = lstatPath(fo.pathOf(rel)); err == nil && made != nil {
					err = made(rel, id)
				}
			}
		}
		if err != nil {
			return err
		}
		if !id.isDir() {
			return fmt.Errorf("%s is not a folder", fo.pathOf(rel))
		}
	}
	return nil
}

func (fo *folder) lstat(name string) (ident, error) {
	if err := fo.checkWay(name, false, nil); err != nil {
		return ident{}, err
	}
	return lstatPath(fo.pathOf(name))
}

func (fo *folder) create(name string, perm uint32, made func(string, ident) error) (*os.File, ident, error) {
	if err := fo.checkWay(name, true, made); err != nil {
		return nil, ident{}, err
	}
	f, err := os.OpenFile(fo.pathOf(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(perm))
	if err != nil {
		return nil, ident{}, err
	}
	id, err := identFile(f)
	return f, id, err
}

func (fo *folder) open(name string, flags int) (*os.File, ident, bool, error) {
	if err := fo.checkWay(name, false, nil); err != nil {
		return nil, ident{}, false, err
	}
	p := fo.pathOf(name)
	created := false
	if id, err := lstatPath(p); err == nil {
		if !id.isReg() {
			return nil, ident{}, false, fmt.Errorf("%s is %s, not a file ckpt wrote", p, id.kind())
		}
	} else if flags&os.O_CREATE != 0 {
		created = true
	}
	f, err := os.OpenFile(p, flags, 0o600)
	if err != nil {
		return nil, ident{}, false, err
	}
	id, err := identFile(f)
	if err == nil && !id.isReg() {
		err = fmt.Errorf("%s is %s, not a file ckpt wrote", p, id.kind())
	}
	if err != nil {
		f.Close()
		return nil, ident{}, false, err
	}
	return f, id, created, nil
}

func (fo *folder) remove(name string, want ident) error {
	got, err := fo.lstat(name)
	if err != nil {
		return err
	}
	if got.mode.Type() != want.mode.Type() {
		return fmt.Errorf("%s is not the %s ckpt made there (%s was put in its place); left as it is", fo.pathOf(name), want.kind(), got.kind())
	}
	return os.Remove(fo.pathOf(name))
}

func (fo *folder) rename(from, to string) error {
	if err := fo.checkWay(from, false, nil); err != nil {
		return err
	}
	if err := fo.checkWay(to, false, nil); err != nil {
		return err
	}
	return renamePath(fo.pathOf(from), fo.pathOf(to))
}

func renamePath(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return &fs.PathError{Op: "rename", Path: dst, Err: fmt.Errorf("%w: something is in the way", os.ErrExist)}
	}
	return os.Rename(src, dst)
}

func (fo *folder) renameOut(name, dst string, replace *ident) error {
	got, err := lstatPath(dst)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return renamePath(fo.pathOf(name), dst)
	case err != nil:
		return err
	case got.isDir():
		return ErrIsFolder
	case replace == nil:
		return fmt.Errorf("%w: it appeared while the output was written", ErrExists)
	case !got.sameFile(*replace):
		return fmt.Errorf("%s: %w: it changed since ckpt checked it was an earlier output's", dst, ErrForeign)
	}
	return os.Rename(fo.pathOf(name), dst)
}

func (fo *folder) list(name string) (map[string]ident, error) {
	p := fo.path
	if name != "" {
		if err := fo.checkWay(name+"/x", false, nil); err != nil {
			return nil, err
		}
		p = fo.pathOf(name)
	}
	es, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	out := map[string]ident{}
	for _, e := range es {
		st, err := e.Info()
		if err != nil {
			continue
		}
		out[e.Name()] = identInfo(st)
	}
	return out, nil
}

func (fo *folder) walk(fn func(string, ident) error) error {
	var rec func(string) error
	rec = func(dir string) error {
		es, err := fo.list(dir)
		if err != nil {
			return err
		}
		for n, id := range es {
			name := n
			if dir != "" {
				name = dir + "/" + n
			}
			if err := fn(name, id); err != nil {
				return err
			}
			if id.isDir() {
				if err := rec(name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return rec("")
}

// lock locks the partial folder against a second writer. A folder cannot be locked here as
// flock locks one on unix, so the lock is taken on a file standing for it outside the
// destination — in the user's temporary folder, named by the hash of the folder's absolute
// path (without case: Windows' names have none) — never inside, where it would be a file
// the journal does not record.
func (fo *folder) lock() error {
	abs, err := filepath.Abs(fo.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(os.TempDir(), "ckpt-locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	name := filepath.Join(dir, fmt.Sprintf("%016x.lock", xxhash.Sum64String(strings.ToLower(abs))))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := lock(f); err != nil {
		f.Close()
		return err
	}
	fo.lockf = f
	return nil
}

func (fo *folder) chmod(mode os.FileMode) error { return os.Chmod(fo.path, mode) }
func (fo *folder) sync() error                  { return nil }

func (fo *folder) syncName(name string, id ident) error {
	if id.isDir() {
		return nil
	}
	f, _, _, err := fo.open(name, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (fo *folder) stillAt(path string) bool {
	got, err := lstatPath(path)
	return err == nil && got.isDir()
}

func (fo *folder) renameFolder(dst string) error {
	if err := renamePath(fo.path, dst); err != nil {
		return err
	}
	fo.path = dst
	return nil
}

func (fo *folder) removeFolder() error { return os.Remove(fo.path) }

func openFileNoFollow(path string) (*os.File, error) {
	id, err := lstatPath(path)
	if err != nil {
		return nil, err
	}
	if !id.isReg() {
		return nil, fmt.Errorf("%s is %s", path, id.kind())
	}
	return os.Open(path)
}

func identFile(f *os.File) (ident, error) {
	st, err := f.Stat()
	if err != nil {
		return ident{}, err
	}
	return identInfo(st), nil
}
