// Package atomicfile writes outputs so that a crash or error never leaves something that
// looks like a finished checkpoint: everything is written under a temporary name in the
// destination's folder, fsynced, and renamed into place only when complete.
//
// It never deletes what it did not write. Replacing an existing destination (force) is
// allowed for a single file, an empty folder, or a folder whose every entry the caller's
// [Owner] claims (the files a manifest of an earlier conversion lists); a folder holding
// anything else is refused, naming what it holds. The final output gets the mode a new file
// or folder gets under the process's umask, as cp gives it; only the temporary one is
// private while being written.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// pending holds how to undo each output still being written, for RemovePending. Its lock
// is also the gate every name an output creates passes through: a temporary output is
// created, a file made inside one and an output renamed into place only while holding it
// and before RemovePending has run (stopped), so that once RemovePending has removed what
// was being written nothing new appears — the interrupted command's goroutines run on
// until the process exits, and would otherwise make again what was just removed.
var pending struct {
	sync.Mutex
	next    int
	undos   map[int]func()
	stopped bool
}

// ErrInterrupted is returned for an output started, written into or committed after
// RemovePending removed the outputs being written.
var ErrInterrupted = errors.New("interrupted: the outputs being written were removed")

// gated runs f holding the gate, unless RemovePending has run.
func gated(f func() error) error {
	pending.Lock()
	defer pending.Unlock()
	if pending.stopped {
		return ErrInterrupted
	}
	return f()
}

// trackCreate runs create and, when it succeeds, registers undo — both holding the gate —
// so that a signal arriving between the two cannot leave what create made behind. A nil
// create registers undo for what exists already.
func trackCreate(create func() error, undo func()) (int, error) {
	var key int
	err := gated(func() error {
		if create != nil {
			if err := create(); err != nil {
				return err
			}
		}
		if pending.undos == nil {
			pending.undos = map[int]func(){}
		}
		pending.next++
		pending.undos[pending.next] = undo
		key = pending.next
		return nil
	})
	return key, err
}

func untrack(key int) {
	pending.Lock()
	defer pending.Unlock()
	delete(pending.undos, key)
}

// commitGated runs commit, which moves an output into place, holding the gate, and
// untracks the output (key) when it succeeds: a signal finds the output either still
// pending (removed) or complete in place, never in between.
func commitGated(key int, commit func() error) error {
	return gated(func() error {
		err := commit()
		if err == nil {
			delete(pending.undos, key)
		}
		return err
	})
}

// RemovePending removes every output still being written (temporary files and folders;
// a member of a shared output removes only its own files) and returns how many there
// were. It is for a signal handler: an interrupted conversion, which Go ends without
// running deferred Aborts, leaves nothing behind. It is final: from then on no output can
// be started, written into or committed in this process (ErrInterrupted), which is about
// to exit.
func RemovePending() int {
	pending.Lock()
	defer pending.Unlock()
	pending.stopped = true
	n := len(pending.undos)
	for k, undo := range pending.undos {
		undo()
		delete(pending.undos, k)
	}
	return n
}

// ErrExists is returned when the destination exists and overwriting was not allowed.
var ErrExists = errors.New("destination exists")

// ErrIsFolder is returned when a file output would replace a folder.
var ErrIsFolder = errors.New("destination is a folder; a file output never replaces one")

// ErrForeign is returned when replacing a folder would delete what ckpt did not write.
var ErrForeign = errors.New("refusing to replace a folder holding files ckpt did not write")

// ErrBusy is returned when another process is writing the same destination.
var ErrBusy = errors.New("another ckpt is writing this destination")

// Owner reports which entries of the existing folder dir an earlier run wrote (names
// relative to dir, the manifest itself included), so that replacing dir deletes nothing
// else. ok is false when dir is not an output of an earlier run.
type Owner func(dir string) (owned []string, ok bool)

// File is an output file being written under a temporary name.
type File struct {
	*os.File
	// CleanedUp is set when the partial output of an earlier, killed run was removed.
	CleanedUp bool
	final     string
	done      bool
	key       int
}

// Create starts writing path. With force false an existing path is an error; with force an
// existing file (or link) is replaced on Commit, but never a folder. The file is written as
// .NAME.partial beside path, locked: a second writer of the same path is refused while
// this one runs, and the leftover of a killed run is removed (File.CleanedUp).
func Create(path string, force bool) (*File, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s: %w", path, ErrIsFolder)
		}
		if !force {
			return nil, fmt.Errorf("%s: %w", path, ErrExists)
		}
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	tmp := partialName(path)
	cleaned := false
	for {
		var f *os.File
		key, err := trackCreate(func() (err error) {
			f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			return err
		}, func() { os.Remove(tmp) })
		if err == nil {
			if lerr := lock(f); lerr != nil {
				untrack(key)
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, ErrBusy)
			}
			return &File{File: f, final: path, CleanedUp: cleaned, key: key}, nil
		}
		if !errors.Is(err, os.ErrExist) || cleaned {
			return nil, err
		}
		// A leftover: busy if another writer holds it, else a killed run's, removed.
		old, oerr := os.Open(tmp)
		if oerr != nil {
			return nil, oerr
		}
		st, serr := old.Stat()
		if serr != nil || !st.Mode().IsRegular() {
			old.Close()
			return nil, fmt.Errorf("%s: %s is in the way and is not a partial output ckpt wrote", path, tmp)
		}
		if lock(old) != nil {
			old.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrBusy)
		}
		os.Remove(tmp)
		old.Close()
		cleaned = true
	}
}

// partialName is where path is written until it is complete.
func partialName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".partial")
}

// Commit fsyncs the file, renames it to its final name and fsyncs the folder.
func (f *File) Commit() error { return CommitAll(f) }

// CommitAll commits files together, in order: each is fsynced, then all are renamed into
// place at once as far as an interruption can tell (RemovePending finds them all pending or
// all in place), so that a file and its manifest, renamed last, never stand apart. When a
// rename fails, the files renamed before it are removed again: nothing is left that the
// manifest does not vouch for.
func CommitAll(files ...*File) error {
	for _, f := range files {
		if f.done {
			return errors.New("atomicfile: already committed or aborted")
		}
	}
	var err error
	for _, f := range files {
		f.done = true
		if err == nil {
			err = f.prepare()
		}
	}
	if err == nil {
		err = gated(func() error { return renameAll(files) })
	}
	for _, f := range files {
		untrack(f.key)
		if err != nil && !errors.Is(err, ErrInterrupted) { // else RemovePending removed it
			f.File.Close()
			os.Remove(f.Name())
		}
	}
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range files {
		if d := filepath.Dir(f.final); !dirs[d] {
			dirs[d] = true
			if err := syncDir(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepare makes the file durable and gives it its final mode, before its rename (through
// the descriptor: the name may be gone, removed by RemovePending).
func (f *File) prepare() error {
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.File.Chmod(fileMode()); err != nil {
		return err
	}
	return f.File.Close()
}

// renameAll moves files into place, holding the gate; on a failure it removes the ones
// already moved.
func renameAll(files []*File) error {
	for i, f := range files {
		err := fmt.Errorf("%s: %w", f.final, ErrIsFolder)
		if st, serr := os.Lstat(f.final); serr != nil || !st.IsDir() {
			err = os.Rename(f.Name(), f.final)
		}
		if err != nil {
			for _, g := range files[:i] {
				os.Remove(g.final)
			}
			return err
		}
		delete(pending.undos, f.key)
	}
	return nil
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
	Path string
	// Resumed lists the files an earlier, killed run of the same output finished (with
	// DirOptions.Resume): their sizes and checksums as its journal recorded them, the files
	// still in Path.
	Resumed map[string]Journaled
	// CleanedUp is set when the partial output of an earlier, killed run was removed
	// (without DirOptions.Resume).
	CleanedUp bool
	final     string
	opts      DirOptions
	lockf     *os.File
	journal   *os.File
	done      bool
	key       int
	// member is set for one of several processes writing the folder (JoinDir).
	member *member
}

// DirOptions say how a folder output may be created.
type DirOptions struct {
	// Force allows replacing an existing destination: a file, or a folder whose entries
	// Owner all claims (see [Owner]; a nil owner claims nothing).
	Force bool
	Owner Owner
	// Resume keeps what a killed run of the same output finished (Dir.Resumed) instead of
	// removing it.
	Resume bool
}

// Journaled is a file of a folder output recorded as finished: fsynced, with its size and
// the xxhash64 of its bytes.
type Journaled struct {
	File     string `json:"file"`
	Size     int64  `json:"size"`
	XXHash64 string `json:"xxhash64"`
}

// journalName is the journal inside a partial folder: one JSON line per finished file.
const journalName = ".ckpt-journal"

// CreateDir starts writing the folder path. An existing empty folder is replaced; with
// force false any other existing path is an error; with force a file is replaced, and a
// folder only when the owner claims every entry in it. The folder is built as
// .NAME.partial beside path, locked against a second writer of the same path; the leftover
// of a killed run is resumed (opts.Resume) or removed.
func CreateDir(path string, opts DirOptions) (*Dir, error) {
	if err := replaceable(path, opts.Force, opts.Owner); err != nil {
		return nil, err
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	tmp := partialName(path)
	d := &Dir{Path: tmp, final: path, opts: opts}
	// Made (or taken over from a killed run) and registered in one step, holding the gate.
	key, err := trackCreate(d.start, func() { os.RemoveAll(tmp) })
	if err != nil {
		return nil, err
	}
	d.key = key
	return d, nil
}

// start makes the partial folder, or deals with the one a killed run left (leftover), and
// locks it and opens its journal.
func (d *Dir) start() error {
	if err := os.Mkdir(d.Path, 0o700); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := d.leftover(); err != nil {
			return err
		}
	} else if err := d.lockDir(); err != nil {
		return err
	}
	j, err := os.OpenFile(filepath.Join(d.Path, journalName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		d.lockf.Close()
		return err
	}
	d.journal = j
	return nil
}

// Create creates the file name (slash-separated, relative to the folder; the folders on its
// way are made) for writing. It fails once the output is committed or aborted, or was
// removed by RemovePending (ErrInterrupted): never does it make the partial folder again.
func (d *Dir) Create(name string) (*os.File, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("%s: %q is not a file name inside the output folder", d.final, name)
	}
	p := filepath.Join(d.Path, filepath.FromSlash(name))
	var f *os.File
	err := gated(func() error {
		if d.done {
			return errors.New("atomicfile: Create after Commit or Abort")
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		return err
	})
	return f, err
}

// lockDir takes the partial folder's lock.
func (d *Dir) lockDir() error {
	f, err := os.Open(d.Path)
	if err != nil {
		return err
	}
	if lock(f) != nil {
		f.Close()
		return fmt.Errorf("%s: %w", d.final, ErrBusy)
	}
	d.lockf = f
	return nil
}

// leftover deals with a partial folder already there: another writer's (busy), something
// ckpt did not write (refused), or a killed run's — resumed or removed.
func (d *Dir) leftover() error {
	st, err := os.Lstat(d.Path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is in the way and is not a partial output ckpt wrote", d.final, d.Path)
	}
	if err := d.lockDir(); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(d.Path, journalName))
	if err != nil {
		d.lockf.Close()
		return fmt.Errorf("%s: %s is in the way and is not a partial output ckpt wrote (no journal)", d.final, d.Path)
	}
	if !d.opts.Resume {
		d.lockf.Close()
		if err := os.RemoveAll(d.Path); err != nil {
			return err
		}
		if err := os.Mkdir(d.Path, 0o700); err != nil {
			return err
		}
		d.CleanedUp = true
		return d.lockDir()
	}
	d.Resumed = map[string]Journaled{}
	for _, line := range strings.Split(string(b), "\n") {
		var j Journaled
		if json.Unmarshal([]byte(line), &j) != nil || j.File == "" {
			continue // a line cut short by the kill: that file is redone
		}
		if st, err := os.Stat(filepath.Join(d.Path, filepath.FromSlash(j.File))); err == nil && st.Size() == j.Size {
			d.Resumed[j.File] = j
		}
	}
	return nil
}

// Finished records in the journal that the file name (fsynced by the caller) is complete,
// so that a resumed run keeps it.
func (d *Dir) Finished(j Journaled) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if _, err := d.journal.Write(append(b, '\n')); err != nil {
		return err
	}
	return d.journal.Sync()
}

// replaceable checks that the folder output path may be written: it does not exist, or is
// an empty folder, or (with force) a file or a folder whose entries owner all claims.
func replaceable(path string, force bool, owner Owner) error {
	st, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if !st.IsDir() {
		if !force {
			return fmt.Errorf("%s: %w", path, ErrExists)
		}
		return nil
	}
	foreign, n, err := foreignEntries(path, owner)
	if err != nil {
		return err
	}
	switch {
	case n == 0:
		return nil
	case !force:
		return fmt.Errorf("%s: %w", path, ErrExists)
	case len(foreign) > 0:
		return fmt.Errorf("%s: %w: %s", path, ErrForeign, listNames(foreign))
	}
	return nil
}

// foreignEntries lists the entries of dir that owner does not claim, and how many entries
// dir has.
func foreignEntries(dir string, owner Owner) (foreign []string, n int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	owned := map[string]bool{}
	if owner != nil {
		if names, ok := owner(dir); ok {
			for _, nm := range names {
				owned[filepath.Clean(nm)] = true
			}
		}
	}
	for _, e := range entries {
		// Only regular files can be claimed: ckpt writes no links or subfolders.
		if !owned[e.Name()] || !e.Type().IsRegular() {
			foreign = append(foreign, e.Name())
		}
	}
	return foreign, len(entries), nil
}

// listNames names up to five entries and how many more there are.
func listNames(names []string) string {
	sort.Strings(names)
	if len(names) > 5 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return strings.Join(names, ", ")
}

// Commit fsyncs every file in the folder and the folder, then moves it into place. An
// existing destination is replaced only after the new one is complete, and only if it may
// be (checked again here: files added to it meanwhile are never deleted).
func (d *Dir) Commit() error {
	if d.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	d.done = true
	defer untrack(d.key)
	fail := func(err error) error {
		d.journal.Close()
		os.RemoveAll(d.Path)
		d.lockf.Close()
		return err
	}
	if d.member != nil {
		// The other members' files stay for another attempt: a failed finish removes nothing.
		fail = func(err error) error {
			d.member.release(d)
			return err
		}
		if err := d.member.prepareCommit(d); err != nil {
			return fail(err)
		}
	}
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return fail(err)
	}
	for _, e := range entries {
		if err := syncPath(filepath.Join(d.Path, e.Name())); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(d.Path, dirMode()); err != nil {
		return fail(err)
	}
	if err := syncDir(d.Path); err != nil {
		return fail(err)
	}
	d.journal.Close()
	if d.member == nil {
		os.Remove(filepath.Join(d.Path, journalName))
	} else if err := d.member.removeControl(d); err != nil {
		return fail(err)
	}
	if err := replaceable(d.final, d.opts.Force, d.opts.Owner); err != nil {
		return fail(err)
	}
	// Moved into place holding the gate: an interruption finds the old destination in
	// place and the new folder pending, or the new one in place.
	var old string
	err = commitGated(d.key, func() error {
		if st, err := os.Lstat(d.final); err == nil {
			old = d.Path + ".old"
			if err := os.Rename(d.final, old); err != nil {
				old = ""
				return err
			}
			if st.IsDir() {
				// Whatever arrived between the check and the move stays: put it all back.
				if foreign, _, err := foreignEntries(old, d.opts.Owner); err != nil || len(foreign) > 0 {
					os.Rename(old, d.final)
					old = ""
					if err == nil {
						err = fmt.Errorf("%s: %w: %s", d.final, ErrForeign, listNames(foreign))
					}
					return err
				}
			}
		}
		if err := os.Rename(d.Path, d.final); err != nil {
			if old != "" {
				os.Rename(old, d.final)
				old = ""
			}
			return err
		}
		return nil
	})
	if d.member != nil {
		d.member.release(d)
	} else {
		d.lockf.Close()
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		return err // RemovePending removed the folder
	case err != nil:
		return fail(err)
	}
	if old != "" {
		removeOwned(old)
	}
	return syncDir(filepath.Dir(d.final))
}

// removeOwned deletes a replaced destination moved aside: a file, or a folder of the files
// (only) that were checked to be ckpt's own.
func removeOwned(old string) {
	st, err := os.Lstat(old)
	if err != nil {
		return
	}
	if !st.IsDir() {
		os.Remove(old)
		return
	}
	entries, _ := os.ReadDir(old)
	for _, e := range entries {
		if e.Type().IsRegular() {
			os.Remove(filepath.Join(old, e.Name()))
		}
	}
	os.Remove(old) // fails, keeping it, if anything else is left
}

// Abort removes the temporary folder — for a member of a shared output (JoinDir), only
// what it wrote, and nothing once its share is sealed.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	if d.member != nil {
		d.member.abort(d)
		untrack(d.key)
		return
	}
	d.journal.Close()
	os.RemoveAll(d.Path)
	d.lockf.Close()
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
