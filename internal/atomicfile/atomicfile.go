// Package atomicfile writes outputs so that a crash or error never leaves something that
// looks like a finished checkpoint: everything is written under a temporary name in the
// destination's folder, fsynced, and renamed into place only when complete.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// pending holds how to undo each output still being written, for RemovePending.
var pending struct {
	sync.Mutex
	next  int
	undos map[int]func()
}

// track registers undo for an output being written and returns its key for untrack.
func track(undo func()) int {
	pending.Lock()
	defer pending.Unlock()
	if pending.undos == nil {
		pending.undos = map[int]func(){}
	}
	pending.next++
	pending.undos[pending.next] = undo
	return pending.next
}

func untrack(key int) {
	pending.Lock()
	defer pending.Unlock()
	delete(pending.undos, key)
}

// RemovePending removes every output still being written (temporary files and folders;
// a folder caught while replacing an older one puts the older one back) and returns how
// many there were. It is for a signal handler: an interrupted conversion, which Go ends
// without running deferred Aborts, leaves nothing behind.
func RemovePending() int {
	pending.Lock()
	defer pending.Unlock()
	n := len(pending.undos)
	for k, undo := range pending.undos {
		undo()
		delete(pending.undos, k)
	}
	return n
}

// ErrExists is returned when the destination exists and overwriting was not allowed.
var ErrExists = errors.New("destination exists (use --force to overwrite)")

// File is an output file being written under a temporary name.
type File struct {
	*os.File
	final string
	done  bool
	key   int
}

// Create starts writing path. With force false an existing path is an error.
func Create(path string, force bool) (*File, error) {
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return nil, fmt.Errorf("%s: %w", path, ErrExists)
		}
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	return &File{File: f, final: path, key: track(func() { os.Remove(tmp) })}, nil
}

// Commit fsyncs the file, renames it to its final name and fsyncs the folder.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	f.done = true
	defer untrack(f.key)
	if err := f.Sync(); err != nil {
		f.File.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.File.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), f.final); err != nil {
		os.Remove(f.Name())
		return err
	}
	return syncDir(filepath.Dir(f.final))
}

// Abort removes the temporary file. It is safe to call after Commit (it does nothing).
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.Name())
	untrack(f.key)
}

// Dir is an output folder being written under a temporary name.
type Dir struct {
	// Path is the temporary folder to write into.
	Path  string
	final string
	force bool
	done  bool
	key   int
}

// CreateDir starts writing the folder path. With force false an existing path is an error.
func CreateDir(path string, force bool) (*Dir, error) {
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return nil, fmt.Errorf("%s: %w", path, ErrExists)
		}
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, err
	}
	return &Dir{Path: tmp, final: path, force: force, key: track(func() { os.RemoveAll(tmp) })}, nil
}

// Commit fsyncs every file in the folder and the folder, then moves it into place (an
// existing destination, allowed by force, is replaced only after the new one is complete).
func (d *Dir) Commit() error {
	if d.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	d.done = true
	defer untrack(d.key)
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		os.RemoveAll(d.Path)
		return err
	}
	for _, e := range entries {
		if err := syncPath(filepath.Join(d.Path, e.Name())); err != nil {
			os.RemoveAll(d.Path)
			return err
		}
	}
	if err := syncDir(d.Path); err != nil {
		os.RemoveAll(d.Path)
		return err
	}
	var old string
	restore := -1
	if d.force {
		if _, err := os.Lstat(d.final); err == nil {
			old = d.Path + ".old"
			if err := os.Rename(d.final, old); err != nil {
				os.RemoveAll(d.Path)
				return err
			}
			// Until the new folder is in place, an interruption puts the old one back.
			restore = track(func() { os.RemoveAll(d.Path); os.Rename(old, d.final) })
		}
	}
	err = os.Rename(d.Path, d.final)
	untrack(restore)
	if err != nil {
		if old != "" {
			os.Rename(old, d.final)
		}
		os.RemoveAll(d.Path)
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return syncDir(filepath.Dir(d.final))
}

// Abort removes the temporary folder.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	os.RemoveAll(d.Path)
	untrack(d.key)
}

// checkParent says plainly when the folder an output would go into does not exist.
func checkParent(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: the folder %s does not exist", path, dir)
		}
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a folder", path, dir)
	}
	return nil
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error { return syncPath(dir) }
