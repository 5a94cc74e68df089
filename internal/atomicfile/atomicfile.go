// Package atomicfile writes outputs so that a crash or error never leaves something that
// looks like a finished checkpoint: everything is written in a partial folder beside the
// destination, fsynced, and moved into place only when complete.
//
// It never deletes, truncates or writes through what it did not write, whatever is
// planted where it works. A partial folder is held by descriptor and everything in it is
// created and removed beneath that descriptor without following links (beneath_*.go); a
// journal records each entry with the inode it got when ckpt made it (journal.go), and
// only an entry the journal lists that is still that inode is ever removed, kept on
// resume, or committed — anything else makes ckpt refuse, naming it, with nothing
// touched. A partial folder is never removed whole: its own entries go one by one, and the
// folder only once empty.
//
// Replacing an existing destination (force) is allowed only for what an earlier run can be
// proven to have written ([Owner]: the size and xxhash64 its manifest records for each
// file) or an empty folder; anything else is refused, naming it. The final output gets the
// mode a new file or folder gets under the process's umask, as cp gives it; only the
// partial folder is private while being written.
package atomicfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// pending holds how to undo each output still being written, for RemovePending. Its lock
// is also the gate every name an output creates passes through: a partial folder is
// made, a file made inside one and an output renamed into place only while holding it and
// before RemovePending has run (stopped), so that once RemovePending has removed what was
// being written nothing new appears — the interrupted command's goroutines run on until
// the process exits, and would otherwise make again what was just removed.
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
// so that a signal arriving between the two cannot leave what create made behind.
func trackCreate(create func() error, undo func()) (int, error) {
	var key int
	err := gated(func() error {
		if err := create(); err != nil {
			return err
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

// RemovePending removes every output still being written (what ckpt made in each partial
// folder; a member of a shared output removes only its own files) and returns how many
// there were. It is for a signal handler: an interrupted conversion, which Go ends without
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

// ErrForeign is returned when writing would delete or take over what ckpt did not write.
var ErrForeign = errors.New("refusing to touch what ckpt cannot prove it wrote")

// ErrBusy is returned when another process is writing the same destination.
var ErrBusy = errors.New("another ckpt is writing this destination")

// ErrUnfinished is returned when the destination holds the partial output of an interrupted
// conversion of another kind (a single process's, where several hosts would write), which
// only resuming that conversion finishes.
var ErrUnfinished = multihost.ErrUnfinished

// Owner reports which files of the earlier output at path an earlier run wrote: each with
// the size and xxhash64 recorded as it was written (names relative to path for a folder
// output, to its folder for a file output). A claim with Size < 0 is the record itself —
// the manifest the claims come from — which is ckpt's when it is a regular file. ok is
// false when path is not an output of an earlier run.
type Owner func(path string) (claims []Journaled, ok bool)

// Journaled is a file of an output recorded as finished: fsynced, with its size and the
// xxhash64 of its bytes (the protocol's record, defined in multihost).
type Journaled = multihost.Finished

// partialName is where path is written until it is complete.
func partialName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".partial")
}

// File is an output file being written in a partial folder.
type File struct {
	*os.File
	// CleanedUp is set when the partial output of an earlier, killed run was removed.
	CleanedUp bool
	final     string
	base      string
	d         *Dir
	// replace identifies the earlier output at final that Commit replaces (nil: none).
	replace *ident
	done    bool
}

// FileOptions say how a file output may be created.
type FileOptions struct {
	// Force allows replacing an existing file: one Owner proves an earlier run wrote; with
	// no Owner (outputs that carry no record, as forward's logits), a regular file. Never
	// a folder, a link or anything but a regular file.
	Force bool
	Owner Owner
}

// Create starts writing the file path (see FileOptions). It is written in the partial
// folder .NAME.partial beside path, locked: a second writer of the same path is refused
// while this one runs, and the leftover of a killed run is removed (File.CleanedUp).
func Create(ctx context.Context, path string, opts FileOptions) (*File, error) {
	var replace *ident
	if id, err := lstatPath(path); err == nil {
		switch {
		case id.isDir():
			return nil, fmt.Errorf("%s: %w", path, ErrIsFolder)
		case !opts.Force:
			// The refusal says what Force would meet: an earlier output it replaces, or
			// the reason it would refuse too.
			if _, err := proveFile(path, id, opts.Owner, false); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", path, ErrExists)
		}
		got, err := proveFile(path, id, opts.Owner, true)
		if err != nil {
			return nil, err
		}
		replace = &got
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	base := filepath.Base(path)
	if multihost.IsControl(base) {
		return nil, fmt.Errorf("%s: the name %s is reserved for ckpt's control files", path, base)
	}
	d, err := startDir(ctx, path, DirOptions{})
	if err != nil {
		return nil, err
	}
	f, err := d.Create(base)
	if err != nil {
		d.Abort()
		return nil, err
	}
	return &File{File: f, CleanedUp: d.CleanedUp, final: path, base: base, d: d, replace: replace}, nil
}

// proveFile checks that the existing file at path (id) may be replaced: a regular file
// that owner proves an earlier run wrote, or with no owner any regular file. Without hash
// only the recorded size is compared (enough to tell what a refusal should say).
func proveFile(path string, id ident, owner Owner, hash bool) (ident, error) {
	if !id.isReg() {
		return ident{}, fmt.Errorf("%s: %w: it is %s", path, ErrForeign, id.kind())
	}
	if owner == nil {
		return id, nil
	}
	claims, ok := owner(path)
	if !ok {
		return ident{}, fmt.Errorf("%s: %w: no ckpt manifest beside it records it", path, ErrForeign)
	}
	for _, c := range claims {
		if c.File == filepath.Base(path) {
			return proveOpen(path, c, func() (*os.File, ident, error) { return openNoFollow(path) }, hash)
		}
	}
	return ident{}, fmt.Errorf("%s: %w: the ckpt manifest beside it does not record its size and xxhash64 (one written before ckpt recorded them proves nothing: remove the file yourself)", path, ErrForeign)
}

// Commit fsyncs the file, moves it to its final name and fsyncs the folder.
func (f *File) Commit() error { return CommitAll(f) }

// CommitAll commits files together, in order: each is fsynced, then all are moved into
// place at once as far as an interruption can tell (RemovePending finds them all pending or
// all in place), so that a file and its manifest, moved last, never stand apart. When a
// move fails, the files moved before it are removed again: nothing is left that the
// manifest does not vouch for. A file replaces only the earlier output proven at Create,
// and only if it is still that file; else only a free name.
func CommitAll(files ...*File) error {
	for _, f := range files {
		if f.done {
			return errors.New("atomicfile: already committed or aborted")
		}
	}
	var err error
	made := make([]ident, len(files))
	for i, f := range files {
		f.done = true
		if err == nil {
			made[i], err = f.prepare()
		}
	}
	if err == nil {
		err = gated(func() error {
			for i, f := range files {
				if err := f.d.p.fo.renameOut(f.base, f.final, f.replace); err != nil {
					for j, g := range files[:i] {
						if got, serr := lstatPath(g.final); serr == nil && got.ino == made[j].ino && got.dev == made[j].dev {
							os.Remove(g.final)
						}
					}
					return fmt.Errorf("%s: %w", f.final, err)
				}
			}
			// The partial folders hold only their journals now.
			for _, f := range files {
				f.d.discard()
				delete(pending.undos, f.d.key)
			}
			return nil
		})
	}
	for _, f := range files {
		if err != nil && !errors.Is(err, ErrInterrupted) { // else RemovePending removed it
			f.File.Close()
			f.d.discard()
		}
		untrack(f.d.key)
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

// prepare makes the file durable and gives it its final mode before it moves (through the
// descriptor: the name may be gone, removed by RemovePending), returning its identity.
func (f *File) prepare() (ident, error) {
	if err := f.Sync(); err != nil {
		return ident{}, err
	}
	if err := f.File.Chmod(fileMode()); err != nil {
		return ident{}, err
	}
	id, err := identFile(f.File)
	if err != nil {
		return ident{}, err
	}
	return id, f.File.Close()
}

// Abort removes the partial file and its folder. It is safe to call after Commit (it does
// nothing).
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	f.d.Abort()
}

// Dir is an output folder being written as a partial folder.
type Dir struct {
	// Path is the partial folder to write into (through Create).
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
	p         *partial
	// proof identifies the entries of the existing destination proven to be an earlier
	// run's, for Commit to replace.
	proof map[string]ident
	done  bool
	key   int
	// member is set for one of several processes writing the folder (JoinDir).
	member *member
}

// DirOptions say how a folder output may be created.
type DirOptions struct {
	// Force allows replacing an existing destination: a folder whose every entry Owner
	// proves an earlier run wrote (see [Owner]; a nil owner proves nothing).
	Force bool
	Owner Owner
	// Resume keeps what a killed run of the same output finished (Dir.Resumed) instead of
	// removing it.
	Resume bool
}

// CreateDir starts writing the folder path. An existing empty folder is replaced; with
// force false any other existing path is an error; with force a folder is replaced when
// the owner proves every entry in it. The folder is built as .NAME.partial beside path,
// locked against a second writer of the same path; the leftover of a killed run is
// resumed (opts.Resume) or removed — what its journal proves ckpt made, and only if
// nothing else is there.
func CreateDir(ctx context.Context, path string, opts DirOptions) (*Dir, error) {
	proof, err := replaceable(path, opts.Force, opts.Owner)
	if err != nil {
		return nil, err
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	d, err := startDir(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	d.proof = proof
	return d, nil
}

// startDir makes (or takes over) the partial folder of path and registers its undo, in
// one step holding the gate.
func startDir(ctx context.Context, path string, opts DirOptions) (*Dir, error) {
	d := &Dir{Path: partialName(path), final: path, opts: opts}
	key, err := trackCreate(func() error { return d.start(ctx) }, d.discard)
	if err != nil {
		return nil, err
	}
	d.key = key
	return d, nil
}

// inTheWay is the error for a partial folder's name taken by something ckpt cannot take
// over.
func (d *Dir) inTheWay(why error) error {
	return fmt.Errorf("%s: %w: %s is in the way and is not a partial output ckpt wrote (%w); nothing was removed", d.final, ErrForeign, d.Path, why)
}

// start makes the partial folder, or deals with the one a killed run left (leftover), and
// locks it and opens its journal.
func (d *Dir) start(ctx context.Context) error {
	err := os.Mkdir(d.Path, 0o700)
	fresh := err == nil
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fo, err := openFolder(d.Path, true)
	if err != nil {
		return d.inTheWay(err)
	}
	if fo.lock() != nil {
		fo.close()
		return fmt.Errorf("%s: %w", d.final, ErrBusy)
	}
	d.p = newPartial(fo)
	if !fresh {
		if err := d.leftover(ctx); err != nil {
			fo.close()
			d.p = nil
			return err
		}
	}
	if d.p.j == nil {
		if d.p.j, err = newJournal(fo, multihost.SingleJournal); err != nil {
			if fresh {
				fo.removeFolder()
			}
			fo.close()
			d.p = nil
			return err
		}
	}
	return nil
}

// leftover deals with a partial folder already there (locked): another writer's (busy),
// something ckpt did not write (refused, nothing touched), or a killed run's — resumed or
// removed entry by entry, what its journal proves ckpt made.
func (d *Dir) leftover(ctx context.Context) error {
	fo := d.p.fo
	j, jid, err := readJournal(fo, multihost.SingleJournal)
	if err != nil {
		return d.inTheWay(err)
	}
	all, err := surveyAll(fo)
	if err != nil {
		return err
	}
	if j == nil {
		if len(all) == 0 {
			return nil // a kill between making the folder and its journal
		}
		for name := range all {
			if strings.HasPrefix(name, multihost.HostPrefix) {
				return fmt.Errorf("%s: %s is the partial output of a multi-host conversion; finish it with its hosts or remove it first", d.final, d.Path)
			}
		}
		return d.inTheWay(errors.New("it has no journal"))
	}
	var foreign []string
	for name, id := range all {
		if name == multihost.SingleJournal || proves(j, name, id) {
			continue
		}
		foreign = append(foreign, name)
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%s: %w: %s holds %s, which ckpt cannot prove it made; nothing was removed", d.final, ErrForeign, d.Path, listNames(foreign))
	}
	d.p.adopt(j, all)
	if d.opts.Resume {
		plan, err := multihost.Leftovers(ctx, carrier{d}, 0, j, true)
		if err != nil {
			return err
		}
		if err := multihost.Apply(ctx, carrier{d}, plan); err != nil {
			return err
		}
		d.Resumed = map[string]Journaled{}
		for _, e := range plan.Keep {
			d.Resumed[e.File] = e
			d.p.sums[e.File] = e
		}
		d.p.j, err = appendJournal(fo, multihost.SingleJournal, jid)
		return err
	}
	if err := d.p.removeAll(); err != nil {
		return err
	}
	if err := fo.remove(multihost.SingleJournal, jid); err != nil {
		return err
	}
	d.CleanedUp = true
	return nil
}

// Create creates the file name (slash-separated, relative to the folder; the folders on its
// way are made) for writing. Nothing there may be in its way: a file is never opened
// twice or through a link. It fails once the output is committed or aborted, or was
// removed by RemovePending (ErrInterrupted): never does it make the partial folder again.
func (d *Dir) Create(name string) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%s: %q is not a file name inside the output folder", d.final, name)
	}
	if first, _, _ := strings.Cut(name, "/"); multihost.IsControl(first) {
		return nil, fmt.Errorf("%s: the name %s is reserved for ckpt's control files", d.final, first)
	}
	var f *os.File
	err := gated(func() error {
		if d.done {
			return errors.New("atomicfile: Create after Commit or Abort")
		}
		var err error
		f, err = d.p.create(name)
		return err
	})
	return f, err
}

// Open opens the finished file name of a resumed output for reading: only a file this
// output's journal proves ckpt made, never through a link.
func (d *Dir) Open(name string) (*os.File, error) {
	return d.p.open(name)
}

// Finished records in the journal that the file name (fsynced by the caller) is complete,
// with its size and xxhash64, so that a resumed run keeps it.
func (d *Dir) Finished(j Journaled) error {
	return d.p.finished(j)
}

// Sums returns the size and xxhash64 of every finished file of the output, by name: this
// run's, the resumed ones and, for the finisher of a shared output, every member's.
func (d *Dir) Sums() (map[string]Journaled, error) {
	if d.member != nil {
		return d.member.sums(d)
	}
	return d.p.finishedSums(), nil
}

// replaceable checks that the folder output path may be written: it does not exist, or is
// an empty folder, or (with force) a folder whose every entry owner proves an earlier
// run wrote. It returns what it proved.
func replaceable(path string, force bool, owner Owner) (map[string]ident, error) {
	id, err := lstatPath(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if !id.isDir() {
		return nil, fmt.Errorf("%s: %w: a folder output never replaces %s", path, ErrForeign, id.kind())
	}
	fo, err := openFolder(path, false)
	if err != nil {
		return nil, err
	}
	defer fo.close()
	return proveFolder(fo, path, force, owner)
}

// proveFolder checks the entries of the existing destination folder fo (at path) as
// replaceable does.
func proveFolder(fo *folder, path string, force bool, owner Owner) (map[string]ident, error) {
	es, err := fo.list("")
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return map[string]ident{}, nil
	}
	if !force {
		// The refusal says what force would meet: an earlier output it replaces (as far
		// as names and sizes tell), or the reason it would refuse too.
		if _, err := proveEntries(fo, path, es, owner, false); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, ErrExists)
	}
	return proveEntries(fo, path, es, owner, true)
}

// proveEntries checks that owner proves an earlier run wrote every entry es of the folder
// fo (at path): their sizes, and with hash their xxhash64.
func proveEntries(fo *folder, path string, es map[string]ident, owner Owner, hash bool) (map[string]ident, error) {
	var claims []Journaled
	ok := false
	if owner != nil {
		claims, ok = owner(path)
	}
	if !ok {
		names := make([]string, 0, len(es))
		for n := range es {
			names = append(names, n)
		}
		return nil, fmt.Errorf("%s: %w: no ckpt manifest there proves it wrote %s", path, ErrForeign, listNames(names))
	}
	byName := map[string]Journaled{}
	for _, c := range claims {
		byName[filepath.Clean(c.File)] = c
	}
	proof := map[string]ident{}
	var foreign []string
	for n, id := range es {
		c, ok := byName[n]
		if !ok || !id.isReg() {
			// ckpt's outputs hold files only; a subfolder, a link or anything unlisted is
			// not proven.
			foreign = append(foreign, n)
			continue
		}
		got, err := proveOpen(filepath.Join(path, n), c, func() (*os.File, ident, error) {
			f, id, _, err := fo.open(n, os.O_RDONLY)
			return f, id, err
		}, hash)
		if err != nil {
			foreign = append(foreign, n)
			continue
		}
		proof[n] = got
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("%s: %w: %s (not recorded by the ckpt manifest there with its size and xxhash64, or not what it records)", path, ErrForeign, listNames(foreign))
	}
	return proof, nil
}

// listNames names up to five entries and how many more there are.
var listNames = multihost.ListNames

// Commit fsyncs every file in the folder and the folder, then moves it into place. The
// folder must hold nothing but what this output made (and, shared, its members). An
// existing destination is replaced only after the new one is complete, and only if it is
// still what was proven replaceable: anything added to it meanwhile is never deleted.
func (d *Dir) Commit(ctx context.Context) error {
	if d.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	d.done = true
	defer untrack(d.key)
	if d.member != nil {
		return d.member.commit(ctx, d)
	}
	fo := d.p.fo
	fail := func(err error) error {
		d.discard()
		return err
	}
	all, err := surveyAll(fo)
	if err != nil {
		return fail(err)
	}
	var foreign []string
	for name, id := range all {
		if !(name == multihost.SingleJournal && id.ino == d.p.j.id.ino) && !d.p.made(name, id) {
			foreign = append(foreign, name)
		}
	}
	if len(foreign) > 0 {
		return fail(fmt.Errorf("%s: %w: %s holds %s, which this conversion did not write", d.final, ErrForeign, d.Path, listNames(foreign)))
	}
	proof, err := d.destination()
	if err != nil {
		return fail(err)
	}
	if err := d.p.syncAll(); err != nil {
		return fail(err)
	}
	d.p.j.close()
	if err := fo.remove(multihost.SingleJournal, d.p.j.id); err != nil {
		return fail(err)
	}
	return d.place(proof, fail)
}

// destination proves the destination the output replaces: what was proven at the start
// (hashed) is checked again as it moves (stillProven); a destination that appeared since
// is proven now.
func (d *Dir) destination() (map[string]ident, error) {
	if d.proof != nil {
		return d.proof, nil
	}
	return replaceable(d.final, d.opts.Force, d.opts.Owner)
}

// place moves the partial folder — complete, durable, its journals gone — into place,
// replacing the destination proof identifies; fail undoes what a failure leaves.
func (d *Dir) place(proof map[string]ident, fail func(error) error) error {
	fo := d.p.fo
	if err := fo.sync(); err != nil {
		return fail(err)
	}
	// Moved into place holding the gate: an interruption finds the old destination in
	// place and the new folder pending, or the new one in place.
	var old string
	err := commitGated(d.key, func() error {
		if _, err := lstatPath(d.final); err == nil {
			old = d.Path + ".old"
			if err := renamePath(d.final, old); err != nil {
				old = ""
				return err
			}
			// Whatever arrived between the check and the move stays: put it all back.
			if err := stillProven(old, proof); err != nil {
				renamePath(old, d.final)
				old = ""
				return fmt.Errorf("%s: %w", d.final, err)
			}
		}
		if err := fo.chmod(dirMode()); err != nil {
			return err
		}
		if err := fo.renameFolder(d.final); err != nil {
			fo.chmod(0o700)
			if old != "" {
				renamePath(old, d.final)
				old = ""
			}
			return err
		}
		return nil
	})
	if d.member != nil {
		d.member.release(d)
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		return err // RemovePending removed the folder
	case err != nil:
		return fail(err)
	}
	if d.member == nil {
		d.p.close()
	}
	if old != "" {
		removeProven(old, proof)
	}
	return syncDir(filepath.Dir(d.final))
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

// stillProven checks that the folder at path holds exactly the entries proof identifies,
// unchanged.
func stillProven(path string, proof map[string]ident) error {
	fo, err := openFolder(path, false)
	if err != nil {
		return err
	}
	defer fo.close()
	es, err := fo.list("")
	if err != nil {
		return err
	}
	var foreign []string
	for n, id := range es {
		if want, ok := proof[n]; !ok || !id.sameFile(want) {
			foreign = append(foreign, n)
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%w: %s arrived or changed while the output was written", ErrForeign, listNames(foreign))
	}
	return nil
}

// removeProven deletes a replaced destination moved aside to old: the entries proof
// identifies (each only if it is still that file), then the folder if nothing else is
// left.
func removeProven(old string, proof map[string]ident) {
	fo, err := openFolder(old, false)
	if err != nil {
		return
	}
	defer fo.close()
	for n, id := range proof {
		fo.remove(n, id)
	}
	fo.removeFolder() // fails, keeping it, if anything else is left
}

// Abort removes what this output made in its partial folder, and the folder once empty —
// for a member of a shared output (JoinDir), only what it wrote, and nothing once its
// share is sealed.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	d.discard()
	untrack(d.key)
}

// discard removes what the output made, its journal and the partial folder once empty,
// and lets go of it (RemovePending's undo).
func (d *Dir) discard() {
	if d.member != nil {
		d.member.abort(d)
		return
	}
	if d.p == nil || d.p.closed {
		return
	}
	d.p.removeAll()
	if d.p.j != nil {
		d.p.j.close()
		d.p.fo.remove(multihost.SingleJournal, d.p.j.id)
	}
	d.p.fo.removeFolder() // fails, keeping it, while anything foreign is left in it
	d.p.close()
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

// syncDir fsyncs the folder dir.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
