//go:build unix

package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// folder is a folder held open by descriptor. Every name ckpt creates, opens, renames or
// removes inside it is resolved beneath that descriptor one component at a time, none
// followed when it is a link (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), so that nothing planted in
// the folder — a link, a FIFO, a folder where a file belongs — can lead an operation
// anywhere else or make it wait.
type folder struct {
	f    *os.File
	path string
	id   ident
}

// ident is what identifies a file ckpt made: its inode (within the folder's file system),
// kind, link count, size and modification time, read without following links.
type ident struct {
	ino   uint64
	dev   uint64
	mode  uint32 // S_IFMT bits
	nlink uint64
	size  int64
	mtime int64
}

func (i ident) isReg() bool { return i.mode == unix.S_IFREG }
func (i ident) isDir() bool { return i.mode == unix.S_IFDIR }

// kind names what a file is, for messages.
func (i ident) kind() string {
	switch i.mode {
	case unix.S_IFREG:
		if i.nlink > 1 {
			return "a file with other links to it"
		}
		return "a file"
	case unix.S_IFDIR:
		return "a folder"
	case unix.S_IFLNK:
		return "a link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "not a file"
}

// sameFile reports whether i is the file recorded as want: same inode and kind on the same
// file system, not modified since (for a regular file: size and modification time).
func (i ident) sameFile(want ident) bool {
	return i.ino == want.ino && i.dev == want.dev && i.mode == want.mode &&
		(!i.isReg() || (i.size == want.size && i.mtime == want.mtime))
}

func identOf(st *unix.Stat_t) ident {
	return ident{ino: uint64(st.Ino), dev: uint64(st.Dev), mode: uint32(st.Mode) & unix.S_IFMT,
		nlink: uint64(st.Nlink), size: st.Size, mtime: st.Mtim.Nano()}
}

// lstatPath identifies the file at path without following a final link.
func lstatPath(path string) (ident, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return ident{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return identOf(&st), nil
}

// openFolder opens the folder at path, refusing a link or anything but a folder. With
// own, it must also belong to the user running ckpt: a partial folder ckpt made is, and
// one another user made is not ckpt's to write into or clear.
func openFolder(path string, own bool) (*folder, error) {
	fd, err := openRetry(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s is not a folder (%w)", path, err)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	fo := &folder{f: os.NewFile(uintptr(fd), path), path: path, id: identOf(&st)}
	if own && st.Uid != uint32(os.Geteuid()) {
		fo.close()
		return nil, fmt.Errorf("%s belongs to user %d, not to the user running ckpt (%d)", path, st.Uid, os.Geteuid())
	}
	return fo, nil
}

func (fo *folder) close() { fo.f.Close() }

func (fo *folder) fd() int { return int(fo.f.Fd()) }

// openRetry is openat, retried when a signal interrupts it.
func openRetry(dirfd int, name string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, perm)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// checkName accepts a slash-separated name inside the folder: no "..", no empty or "."
// element, not absolute.
func checkName(name string) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("%q is not a name inside the folder", name)
	}
	return nil
}

// parent opens the folder holding name beneath fo, one component at a time, never
// following a link; with mkdir, missing folders on the way are made and each passed to
// made (with its name relative to fo) before being entered. It returns the parent's
// descriptor (fo's own for a name at the top, which release leaves open) and the last
// element.
func (fo *folder) parent(name string, mkdir bool, made func(dir string, id ident) error) (dirfd int, base string, release func(), err error) {
	if err := checkName(name); err != nil {
		return -1, "", nil, err
	}
	elems := strings.Split(name, "/")
	cur := fo.fd()
	release = func() {}
	closeCur := func() {
		if cur != fo.fd() {
			unix.Close(cur)
		}
	}
	for i, e := range elems[:len(elems)-1] {
		next, err := openRetry(cur, e, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if errors.Is(err, unix.ENOENT) && mkdir {
			if err = unix.Mkdirat(cur, e, 0o755); err == nil {
				next, err = openRetry(cur, e, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
				if err == nil && made != nil {
					var st unix.Stat_t
					if err = unix.Fstat(next, &st); err == nil {
						err = made(strings.Join(elems[:i+1], "/"), identOf(&st))
					}
					if err != nil {
						unix.Close(next)
					}
				}
			}
		}
		if err != nil {
			closeCur()
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				err = fmt.Errorf("%s is not a folder", strings.Join(elems[:i+1], "/"))
			}
			return -1, "", nil, &fs.PathError{Op: "open", Path: filepath.Join(fo.path, filepath.FromSlash(name)), Err: err}
		}
		closeCur()
		cur = next
	}
	if cur != fo.fd() {
		fd := cur
		release = func() { unix.Close(fd) }
	}
	return cur, elems[len(elems)-1], release, nil
}

// pathOf is name's path, for messages and for the *os.File names.
func (fo *folder) pathOf(name string) string { return filepath.Join(fo.path, filepath.FromSlash(name)) }

// lstat identifies name beneath fo without following it.
func (fo *folder) lstat(name string) (ident, error) {
	dirfd, base, release, err := fo.parent(name, false, nil)
	if err != nil {
		return ident{}, err
	}
	defer release()
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return ident{}, &fs.PathError{Op: "lstat", Path: fo.pathOf(name), Err: err}
	}
	return identOf(&st), nil
}

// create makes the new file name beneath fo (never an existing one: O_EXCL), its folders
// made on the way (each reported to made), and returns it open for reading and writing.
func (fo *folder) create(name string, perm uint32, made func(dir string, id ident) error) (*os.File, ident, error) {
	dirfd, base, release, err := fo.parent(name, true, made)
	if err != nil {
		return nil, ident{}, err
	}
	defer release()
	fd, err := openRetry(dirfd, base, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: something is in the way that ckpt did not make", os.ErrExist)
		}
		return nil, ident{}, &fs.PathError{Op: "create", Path: fo.pathOf(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, ident{}, &fs.PathError{Op: "stat", Path: fo.pathOf(name), Err: err}
	}
	return os.NewFile(uintptr(fd), fo.pathOf(name)), identOf(&st), nil
}

// open opens the existing regular file name beneath fo (flags: O_RDONLY, O_RDWR, O_WRONLY
// with O_APPEND or O_CREAT) without following a link and without waiting (a FIFO would
// block an open for reading); anything but a regular file is refused, naming what it is.
// O_CREAT makes it when missing (created reports whether it did).
func (fo *folder) open(name string, flags int) (f *os.File, id ident, created bool, err error) {
	dirfd, base, release, err := fo.parent(name, false, nil)
	if err != nil {
		return nil, ident{}, false, err
	}
	defer release()
	const how = unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := -1, unix.EEXIST
	if flags&unix.O_CREAT != 0 {
		if fd, err = openRetry(dirfd, base, flags|how|unix.O_EXCL, 0o600); err == nil {
			created = true
		}
	}
	if errors.Is(err, unix.EEXIST) {
		fd, err = openRetry(dirfd, base, (flags&^unix.O_CREAT)|how, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = errors.New("a link, which ckpt never follows here")
		}
		return nil, ident{}, false, &fs.PathError{Op: "open", Path: fo.pathOf(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, ident{}, false, &fs.PathError{Op: "stat", Path: fo.pathOf(name), Err: err}
	}
	id = identOf(&st)
	if !id.isReg() {
		unix.Close(fd)
		return nil, ident{}, false, fmt.Errorf("%s is %s, not a file ckpt wrote", fo.pathOf(name), id.kind())
	}
	// Writes and reads of a regular file never wait anyway; clear the flag for clarity.
	unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), fo.pathOf(name)), id, created, nil
}

// remove removes name beneath fo only if it is still the file (or empty folder) want
// identifies; anything else there is left alone and reported.
func (fo *folder) remove(name string, want ident) error {
	dirfd, base, release, err := fo.parent(name, false, nil)
	if err != nil {
		return err
	}
	defer release()
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: fo.pathOf(name), Err: err}
	}
	if got := identOf(&st); got.ino != want.ino || got.dev != want.dev || got.mode != want.mode {
		return fmt.Errorf("%s is not the %s ckpt made there (%s was put in its place); left as it is", fo.pathOf(name), want.kind(), got.kind())
	}
	flags := 0
	if want.isDir() {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dirfd, base, flags); err != nil {
		return &fs.PathError{Op: "remove", Path: fo.pathOf(name), Err: err}
	}
	return nil
}

// rename moves from to the new name to, both beneath fo, never replacing anything.
func (fo *folder) rename(from, to string) error {
	fd1, b1, r1, err := fo.parent(from, false, nil)
	if err != nil {
		return err
	}
	defer r1()
	fd2, b2, r2, err := fo.parent(to, false, nil)
	if err != nil {
		return err
	}
	defer r2()
	return renameNoReplace(fd1, b1, fd2, b2, fo.pathOf(to))
}

// renameNoReplace renames (fd1, b1) to (fd2, b2) unless something is at the new name
// (dst names it for messages): atomically where the system can (renameat2
// RENAME_NOREPLACE), else after checking.
func renameNoReplace(fd1 int, b1 string, fd2 int, b2, dst string) error {
	err := renameat2(fd1, b1, fd2, b2)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return &fs.PathError{Op: "rename", Path: dst, Err: fmt.Errorf("%w: something is in the way", os.ErrExist)}
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.ENOTSUP) {
		return &fs.PathError{Op: "rename", Path: dst, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd2, b2, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return &fs.PathError{Op: "rename", Path: dst, Err: fmt.Errorf("%w: something is in the way", os.ErrExist)}
	}
	if err := unix.Renameat(fd1, b1, fd2, b2); err != nil {
		return &fs.PathError{Op: "rename", Path: dst, Err: err}
	}
	return nil
}

// renameOut moves name beneath fo to the path dst outside it: replacing only what is there
// when it is still the file replace identifies (a proven earlier output), else only onto
// a free name.
func (fo *folder) renameOut(name, dst string, replace *ident) error {
	fd1, b1, r1, err := fo.parent(name, false, nil)
	if err != nil {
		return err
	}
	defer r1()
	got, err := lstatPath(dst)
	if errors.Is(err, os.ErrNotExist) {
		err = renameNoReplace(fd1, b1, unix.AT_FDCWD, dst, dst)
		if err == nil {
			return nil
		}
		if errors.Is(err, os.ErrExist) {
			got, err = lstatPath(dst)
		}
	}
	switch {
	case err != nil:
		return err
	case got.isDir():
		return ErrIsFolder
	case replace == nil:
		return fmt.Errorf("%w: it appeared while the output was written", ErrExists)
	}
	if !got.sameFile(*replace) {
		return fmt.Errorf("%s: %w: it changed since ckpt checked it was an earlier output's", dst, ErrForeign)
	}
	if err := unix.Renameat(fd1, b1, unix.AT_FDCWD, dst); err != nil {
		return &fs.PathError{Op: "rename", Path: dst, Err: err}
	}
	return nil
}

// list returns the entries of the folder name beneath fo ("" for fo itself), each
// identified without following it.
func (fo *folder) list(name string) (map[string]ident, error) {
	fd := fo.fd()
	path := fo.path
	if name != "" {
		dirfd, base, release, err := fo.parent(name, false, nil)
		if err != nil {
			return nil, err
		}
		fd, err = openRetry(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		release()
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: fo.pathOf(name), Err: err}
		}
		path = fo.pathOf(name)
	} else {
		var err error
		// A descriptor of its own: reading entries moves the offset.
		if fd, err = openRetry(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
	d := os.NewFile(uintptr(fd), path)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ident, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, &fs.PathError{Op: "lstat", Path: filepath.Join(path, n), Err: err}
		}
		out[n] = identOf(&st)
	}
	return out, nil
}

// walk passes every entry beneath fo (names relative to it, slash-separated), parents
// before what they hold, never entering a link.
func (fo *folder) walk(fn func(name string, id ident) error) error {
	var rec func(dir string) error
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

// lock takes the folder's own advisory lock (see lock).
func (fo *folder) lock() error { return lock(fo.f) }

// chmod sets the folder's mode through its descriptor.
func (fo *folder) chmod(mode os.FileMode) error { return fo.f.Chmod(mode) }

// sync fsyncs the folder.
func (fo *folder) sync() error { return fo.f.Sync() }

// syncName fsyncs the file or folder name beneath fo, opened without following a link.
func (fo *folder) syncName(name string, id ident) error {
	dirfd, base, release, err := fo.parent(name, false, nil)
	if err != nil {
		return err
	}
	defer release()
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	if id.isDir() {
		flags |= unix.O_DIRECTORY
	}
	fd, err := openRetry(dirfd, base, flags, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: fo.pathOf(name), Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Ino) != id.ino {
		return fmt.Errorf("%s is not the %s ckpt made there", fo.pathOf(name), id.kind())
	}
	return unix.Fsync(fd)
}

// stillAt reports whether path is still fo's folder (not another put in its place).
func (fo *folder) stillAt(path string) bool {
	got, err := lstatPath(path)
	return err == nil && got.ino == fo.id.ino && got.dev == fo.id.dev && got.isDir()
}

// renameFolder moves the folder fo from its path to dst, never replacing anything at dst.
func (fo *folder) renameFolder(dst string) error {
	if !fo.stillAt(fo.path) {
		return fmt.Errorf("%s is no longer the folder ckpt was writing", fo.path)
	}
	return renameNoReplace(unix.AT_FDCWD, fo.path, unix.AT_FDCWD, dst, dst)
}

// renamePath moves src to dst, never replacing anything at dst.
func renamePath(src, dst string) error {
	return renameNoReplace(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, dst)
}

// removeFolder removes fo's folder, which must be empty, if it is still at its path.
func (fo *folder) removeFolder() error {
	if !fo.stillAt(fo.path) {
		return fmt.Errorf("%s is no longer the folder ckpt was writing", fo.path)
	}
	return unix.Rmdir(fo.path)
}

// openFileNoFollow opens path for reading without following a final link or waiting.
func openFileNoFollow(path string) (*os.File, error) {
	fd, err := openRetry(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = errors.New("a link, which ckpt never follows here")
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// identFile identifies the open file f.
func identFile(f *os.File) (ident, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return ident{}, &fs.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	return identOf(&st), nil
}
