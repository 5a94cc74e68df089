package atomicfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// A shared output is one folder written by several processes — the hosts of a multi-host
// conversion, on a file system they all mount — each writing its own files into the same
// partial folder .NAME.partial beside the destination (JoinDir). Nothing appears under the
// final name until one of them, the finisher (member 0), has seen every member's share
// sealed and moves the folder into place; until then the destination does not exist, so a
// half-finished run can never pass for a finished one.
//
// Each member keeps three control files in the partial folder, all named .ckpt-host-N.*:
// a lock held while it writes (a second process for the same member is refused), a
// journal of the files it made (journal.go: so a killed member's leftovers are resumed or
// removed, never another member's, and never anything planted), and, once all its files
// are durable, its part: the caller's record of what it wrote, renamed into place
// atomically. Its journal records its lock and part too. The finisher refuses to commit a
// folder holding anything no member's journal proves it made. What is proven, refused,
// kept or removed, and in what order, is storage/multihost's protocol, of which the
// partial folder is a carrier (carrier, below: it reads entries and proves them by inode,
// removes only what the protocol proved, puts the part through a journaled temporary
// file). What stays here is the folder's own: joining (the partial folder made by the
// first member, the per-member lock files), writing and journaling files (partial.go) and
// the finisher's publication (holding the other members' locks, the rename into place).

// member is one process's share of a shared output.
type member struct {
	host, hosts int
	lockf       *os.File
	lockID      ident
	// sealed is the member's part once sealed (by this run or an earlier one).
	sealed []byte
	// held are the other members' lock files the finisher holds while committing; made
	// those it created (removed with the control files).
	held     []*os.File
	made     map[string]ident
	controls map[string]ident
	released bool
	// ctx is JoinDir's, uncancelled: an abort (RemovePending's too) removes the member's
	// files after the conversion's context is done.
	ctx context.Context
}

// JoinDir starts writing the folder path as member host of hosts of a shared output (see
// above), creating the partial folder if no member has yet. The destination must be
// replaceable as for CreateDir (opts.Force, opts.Owner). A member that finished its share
// in an earlier run finds it sealed (Sealed) with its files kept; otherwise the leftovers
// of its own killed run are resumed (opts.Resume: Dir.Resumed lists what it finished) or
// removed (Dir.CleanedUp). A member never touches another member's files, nor anything
// its journal does not prove it made.
func JoinDir(ctx context.Context, path string, opts DirOptions, host, hosts int) (*Dir, error) {
	if hosts < 2 || host < 0 || host >= hosts {
		return nil, fmt.Errorf("%s: member %d of %d", path, host, hosts)
	}
	proof, err := replaceable(path, opts.Force, opts.Owner)
	if err != nil {
		return nil, err
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	m := &member{host: host, hosts: hosts, controls: map[string]ident{}, made: map[string]ident{}, ctx: context.WithoutCancel(ctx)}
	d := &Dir{Path: partialName(path), final: path, opts: opts, member: m, proof: proof}
	// Joined and registered in one step, holding the gate.
	key, err := trackCreate(func() error { return d.join(ctx) }, func() { m.abort(d) })
	if err != nil {
		return nil, err
	}
	d.key = key
	return d, nil
}

// join makes the partial folder unless another member has, takes this member's lock and
// deals with what an earlier run of it left (sealed, resumed or removed).
func (d *Dir) join(ctx context.Context) error {
	m := d.member
	if err := os.Mkdir(d.Path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fo, err := openFolder(d.Path, true)
	if err != nil {
		return d.inTheWay(err)
	}
	if _, err := fo.lstat(multihost.SingleJournal); err == nil {
		fo.close()
		return fmt.Errorf("%s: %w: %s is the partial output of a single-process conversion; resume that conversion or remove it first", d.final, ErrUnfinished, d.Path)
	}
	lockName := multihost.Control(m.host, multihost.KindLock)
	lf, lid, created, err := fo.open(lockName, os.O_RDWR|os.O_CREATE)
	if err != nil {
		fo.close()
		return d.inTheWay(err)
	}
	if lid.nlink != 1 || lid.size != 0 {
		lf.Close()
		fo.close()
		return d.inTheWay(fmt.Errorf("%s is not a lock file ckpt made", fo.pathOf(lockName)))
	}
	if lock(lf) != nil {
		lf.Close()
		fo.close()
		return fmt.Errorf("%s: host %d: %w", d.final, m.host, ErrBusy)
	}
	m.lockf, m.lockID = lf, lid
	d.p = newPartial(fo)
	if err := d.memberLeftovers(ctx, created); err != nil {
		if created {
			fo.remove(lockName, lid)
		}
		lf.Close()
		d.p.close()
		d.p = nil
		return err
	}
	return nil
}

// memberLeftovers reads this member's journal and deals with what a killed run of it left:
// a sealed share is kept; otherwise the files it finished are resumed (with opts.Resume,
// when their sizes match) and the rest of what it made is removed. Anything its journal
// lists that is not what it made, or a lock or part it did not make, is refused with
// nothing touched. createdLock is set when this run made its lock file.
func (d *Dir) memberLeftovers(ctx context.Context, createdLock bool) error {
	m, fo := d.member, d.p.fo
	jname := multihost.Control(m.host, multihost.KindJournal)
	j, jid, err := readJournal(fo, jname)
	if err != nil {
		return d.inTheWay(err)
	}
	lockName, partName, tmpName := multihost.Control(m.host, multihost.KindLock), multihost.Control(m.host, multihost.KindPart), multihost.Control(m.host, multihost.KindPartTmp)
	if j == nil {
		if !createdLock {
			return d.inTheWay(fmt.Errorf("%s is not a lock file ckpt made (no journal records it)", fo.pathOf(lockName)))
		}
		for _, n := range []string{partName, tmpName} {
			if _, err := fo.lstat(n); err == nil {
				return d.inTheWay(fmt.Errorf("%s is not a file ckpt made (no journal records it)", fo.pathOf(n)))
			}
		}
		if d.p.j, err = newJournal(fo, jname); err != nil {
			return err
		}
		return d.p.j.write(record{Control: lockName, Ino: m.lockID.ino})
	}
	if !createdLock && j.Controls[lockName] != m.lockID.ino {
		return d.inTheWay(fmt.Errorf("%s is not a lock file ckpt made", fo.pathOf(lockName)))
	}
	// Every entry this member's journal names must be what it made, and its part too.
	plan, err := multihost.Leftovers(ctx, carrier{d}, m.host, j, d.opts.Resume)
	if err != nil {
		return d.refused(err)
	}
	found, controls := map[string]ident{}, map[string]ident{}
	for name, o := range plan.Found {
		found[name] = o.Ref.(ident)
	}
	for name, o := range plan.Controls {
		controls[name] = o.Ref.(ident)
	}
	d.p.adopt(j, found)
	for n, id := range controls {
		m.controls[n] = id
	}
	if d.p.j, err = appendJournal(fo, jname, jid); err != nil {
		return err
	}
	if createdLock {
		if err := d.p.j.write(record{Control: lockName, Ino: m.lockID.ino}); err != nil {
			return err
		}
	}
	if id, ok := controls[tmpName]; ok { // a seal cut short
		if err := fo.remove(tmpName, id); err != nil {
			return err
		}
		delete(m.controls, tmpName)
	}
	if id, ok := controls[partName]; ok {
		b, err := readControl(fo, partName, id)
		if err != nil {
			return err
		}
		m.sealed = b
		for name, e := range j.Files {
			if _, ok := d.p.files[name]; ok && e.Finished {
				d.p.sums[name] = Journaled{File: name, Size: e.Size, XXHash64: e.XXHash64}
			}
		}
		return nil
	}
	if d.opts.Resume {
		d.Resumed = map[string]Journaled{}
	}
	if err := multihost.Apply(ctx, carrier{d}, plan); err != nil {
		return err
	}
	d.CleanedUp = plan.Cleaned
	for _, e := range plan.Keep {
		d.Resumed[e.File] = e
		d.p.sums[e.File] = e
	}
	if d.opts.Resume {
		return nil
	}
	return carrier{d}.ResetJournal(ctx, m.host)
}

// readControl reads the control file name of fo, which must still be id: bounded, never
// through a link, never waiting.
func readControl(fo *folder, name string, id ident) ([]byte, error) {
	f, got, _, err := fo.open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if got.ino != id.ino || got.nlink != 1 {
		return nil, fmt.Errorf("%s is no longer the file ckpt made there", fo.pathOf(name))
	}
	if got.size > multihost.MaxPart {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a part may have", fo.pathOf(name), got.size, multihost.MaxPart)
	}
	return io.ReadAll(io.LimitReader(f, multihost.MaxPart))
}

// Sealed returns the part of a member whose share is sealed, by this run or an earlier one.
func (d *Dir) Sealed() ([]byte, bool) {
	if d.member == nil || d.member.sealed == nil {
		return nil, false
	}
	return d.member.sealed, true
}

// Unseal discards a member's sealed share — an earlier run's, of another conversion — so
// that it writes its share anew: the files it made and its part are removed.
func (d *Dir) Unseal(ctx context.Context) error {
	m := d.member
	if m == nil || m.sealed == nil {
		return nil
	}
	if err := multihost.Unseal(ctx, carrier{d}, m.host); err != nil {
		return d.refused(err)
	}
	m.sealed, d.Resumed, d.CleanedUp = nil, nil, true
	return nil
}

// Seal ends a member's writing: the files it finished (each fsynced and journaled by the
// caller) are its share, and part — the caller's record of them — is written atomically
// for the finisher. A sealed share is kept when the member aborts.
func (d *Dir) Seal(ctx context.Context, part []byte) error {
	m := d.member
	if m == nil || d.done || m.sealed != nil {
		return errors.New("atomicfile: Seal is for a member still writing")
	}
	if err := multihost.Seal(ctx, carrier{d}, m.host, part); err != nil {
		return fmt.Errorf("%s: %w", d.final, err)
	}
	m.sealed = part
	return nil
}

// Put writes this member's part (the only control file the protocol puts) as a
// temporary file journaled before its bytes, fsynced, journaled as the part and renamed
// into place — holding the gate: once RemovePending has removed this member's files, no
// part may claim them.
func (s carrier) Put(_ context.Context, host int, name string, part []byte) error {
	d, m := s.d, s.d.member
	if m == nil || host != m.host || name != multihost.Control(m.host, multihost.KindPart) {
		return fmt.Errorf("atomicfile: %s is not this member's part", name)
	}
	fo := d.p.fo
	partName, tmpName := name, multihost.Control(m.host, multihost.KindPartTmp)
	err := gated(func() error {
		f, id, err := fo.create(tmpName, 0o600, nil)
		if err != nil {
			return err
		}
		m.controls[tmpName] = id
		err = d.p.j.write(record{Control: tmpName, Ino: id.ino})
		if err == nil {
			_, err = f.Write(part)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = d.p.j.write(record{Control: partName, Ino: id.ino})
		}
		if err == nil {
			err = fo.rename(tmpName, partName)
		}
		if err != nil {
			fo.remove(tmpName, id)
			delete(m.controls, tmpName)
			return err
		}
		delete(m.controls, tmpName)
		m.controls[partName] = id
		return nil
	})
	if err != nil {
		return err
	}
	return fo.sync()
}

// Parts returns every member's part, in member order, nil for those not sealed yet (each
// read bounded, a regular file only; the finisher checks each against its member's
// journal before committing).
func (d *Dir) Parts(ctx context.Context) ([][]byte, error) {
	m := d.member
	if m == nil {
		return nil, errors.New("atomicfile: Parts is for the members of a shared output")
	}
	return multihost.Parts(ctx, carrier{d}, m.hosts)
}

// sealedExit is how long the finisher waits for a host that sealed its share to let go
// of its lock.
const sealedExit = 30 * time.Second

// Verify checks, for the finisher of a shared output, that every member has sealed its
// share and that the partial folder holds nothing but what the members' journals prove
// they made — before anything there is read back.
func (d *Dir) Verify(ctx context.Context) error {
	if d.member == nil {
		return errors.New("atomicfile: Verify is for the members of a shared output")
	}
	_, err := multihost.Verify(ctx, carrier{d}, -1, d.member.hosts)
	return d.refused(err)
}

// refused says where the protocol refused (the partial folder of the destination), and
// that what a host did not write is ErrForeign.
func (d *Dir) refused(err error) error {
	var r *multihost.Refusal
	switch {
	case !errors.As(err, &r):
		return err
	case r.IsForeign():
		return fmt.Errorf("%s: %w: %s: %w", d.final, ErrForeign, d.Path, err)
	}
	return fmt.Errorf("%s: %w", d.final, err)
}

// carrier is a partial folder as the multi-host protocol reads it (multihost.Carrier):
// an entry is a member's when its journal records that inode, of that kind, with one link
// (journal.go); a member's lock when it is the empty file it made (or the finisher made, or
// this member holds). A single process's partial folder is read as member 0's.
type carrier struct{ d *Dir }

// object describes the entry id; an entry that cannot be looked at (a link on the way) is
// one nobody proves.
func object(id ident, err error) multihost.Object {
	if err != nil {
		return multihost.Object{}
	}
	return multihost.Object{Size: id.size, Dir: id.isDir(), Ref: id}
}

func (s carrier) List(context.Context) (map[string]multihost.Object, error) {
	all, err := surveyAll(s.d.p.fo)
	if err != nil {
		return nil, err
	}
	out := make(map[string]multihost.Object, len(all))
	for name, id := range all {
		out[name] = object(id, nil)
	}
	return out, nil
}

func (s carrier) Stat(_ context.Context, name string) (multihost.Object, bool, error) {
	id, err := s.d.p.fo.lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return multihost.Object{}, false, nil
	}
	return object(id, err), true, nil
}

func (s carrier) Journal(_ context.Context, host int) (*multihost.Journal, error) {
	j, _, err := readJournal(s.d.p.fo, multihost.Control(host, multihost.KindJournal))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", s.d.final, ErrForeign, err)
	}
	return j, nil
}

// Part reads host's part: bounded, a regular file only.
func (s carrier) Part(_ context.Context, host int) ([]byte, error) {
	fo, name := s.d.p.fo, multihost.Control(host, multihost.KindPart)
	id, err := fo.lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !id.isReg() || id.nlink != 1 {
		return nil, fmt.Errorf("%s: %w: %s is %s, not a part ckpt wrote", s.d.final, ErrForeign, fo.pathOf(name), id.kind())
	}
	return readControl(fo, name, id)
}

func (s carrier) Owns(_ context.Context, host int, j *multihost.Journal, name string, o multihost.Object) (bool, error) {
	id, ok := o.Ref.(ident)
	if !ok {
		return false, nil
	}
	m := s.d.member
	if m == nil {
		return j != nil && !multihost.IsControl(name) && proves(j, name, id), nil
	}
	switch name {
	case multihost.Control(host, multihost.KindPart), multihost.Control(host, multihost.KindPartTmp):
		return j != nil && id.isReg() && id.nlink == 1 && j.Controls[name] == id.ino, nil
	case multihost.Control(host, multihost.KindLock):
		if made, ok := m.made[name]; ok && id.ino == made.ino {
			return true, nil
		}
		if host == m.host && id.ino == m.lockID.ino {
			return true, nil
		}
		return j != nil && id.isReg() && id.nlink == 1 && id.size == 0 && j.Controls[name] == id.ino, nil
	}
	return j != nil && !multihost.IsControl(name) && proves(j, name, id), nil
}

// Remove removes the entry name while it is still o (its inode and kind, found and
// proven by the protocol), through no link: a control file, or an entry this process
// made or adopted, which it then lets go of. A folder goes only when empty.
func (s carrier) Remove(_ context.Context, name string, o multihost.Object) error {
	id, ok := o.Ref.(ident)
	if !ok {
		return fmt.Errorf("%s: %w: %s was not proven ckpt's", s.d.final, ErrForeign, s.d.p.fo.pathOf(name))
	}
	if !multihost.IsControl(name) {
		return s.d.p.removeEntry(name, id)
	}
	if err := s.d.p.fo.remove(name, id); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if m := s.d.member; m != nil {
		delete(m.controls, name)
	}
	return nil
}

// ResetJournal empties this member's journal but for its header and the record of the
// lock it holds.
func (s carrier) ResetJournal(_ context.Context, host int) error {
	m := s.d.member
	if m == nil || host != m.host {
		return fmt.Errorf("atomicfile: host %d's journal is not this member's", host)
	}
	if err := s.d.p.j.truncate(s.d.p.fo); err != nil {
		return err
	}
	return s.d.p.j.write(record{Control: multihost.Control(m.host, multihost.KindLock), Ino: m.lockID.ino})
}

// RemoveJournal closes and removes this member's journal (the file it holds open, by
// inode).
func (s carrier) RemoveJournal(_ context.Context, host int) error {
	m, j := s.d.member, s.d.p.j
	if m == nil || host != m.host || j == nil {
		return fmt.Errorf("atomicfile: host %d's journal is not this member's", host)
	}
	j.close()
	return s.d.p.fo.remove(multihost.Control(host, multihost.KindJournal), j.id)
}

// sums returns every member's finished files (for the finisher's manifest).
func (m *member) sums(d *Dir) (map[string]Journaled, error) {
	out := d.p.finishedSums()
	for h := range m.hosts {
		if h == m.host {
			continue
		}
		j, _, err := readJournal(d.p.fo, multihost.Control(h, multihost.KindJournal))
		if err != nil {
			return nil, err
		}
		if j == nil {
			continue
		}
		for name, e := range j.Files {
			if e.Finished {
				out[name] = Journaled{File: name, Size: e.Size, XXHash64: e.XXHash64}
			}
		}
	}
	return out, nil
}

// commit finishes the shared output for its finisher (multihost.Commit, the folder its
// Publisher: finish). A failed finish removes nothing of the members': only the locks it
// made for them go, and it lets go of its own.
func (m *member) commit(ctx context.Context, d *Dir) error {
	fail := func(err error) error {
		for name, id := range m.made { // the other hosts' locks it made
			d.p.fo.remove(name, id)
		}
		m.release(d)
		return err
	}
	if m.host != 0 {
		return fail(fmt.Errorf("%s: host %d cannot finish the output; host 0 does", d.final, m.host))
	}
	f := &finish{carrier: carrier{d}, fail: fail}
	if err := multihost.Commit(ctx, f, -1, m.hosts); err != nil {
		if f.placing {
			return err // place undid what it had to
		}
		return fail(d.refused(err))
	}
	return nil
}

// finish is the partial folder as its finisher publishes it (multihost.Publisher).
type finish struct {
	carrier
	fail    func(error) error
	proof   map[string]ident
	placing bool
}

// Hold takes every other member's lock (making it for a member that never started): none
// may still be writing. A member that sealed its share holds its lock until its process
// is done, so it is given a moment (under load, the time between its seal and its exit).
func (f *finish) Hold(context.Context) error {
	d, m := f.d, f.d.member
	fo := d.p.fo
	if m.made == nil {
		m.made = map[string]ident{}
	}
	for h := range m.hosts {
		if h == m.host {
			continue
		}
		name := multihost.Control(h, multihost.KindLock)
		lf, id, created, err := fo.open(name, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", d.final, ErrForeign, err)
		}
		if created {
			m.made[name] = id
		}
		m.held = append(m.held, lf)
		err = lock(lf)
		if _, serr := fo.lstat(multihost.Control(h, multihost.KindPart)); serr == nil {
			for deadline := time.Now().Add(sealedExit); err != nil && time.Now().Before(deadline); err = lock(lf) {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: host %d is still writing (it holds its lock)", d.final, h)
		}
	}
	return nil
}

// Publish proves the destination the folder replaces and makes every file durable; the
// finisher's journal is closed, for Retire to remove.
func (f *finish) Publish(context.Context) error {
	proof, err := f.d.destination()
	if err != nil {
		return err
	}
	f.proof = proof
	if err := f.d.p.syncAll(); err != nil {
		return err
	}
	f.d.p.j.close()
	return nil
}

// Finish checks that nothing of a host's is left (anything there is not proven: the
// commit stops) and moves the folder into place.
func (f *finish) Finish(context.Context) error {
	d := f.d
	es, err := d.p.fo.list("")
	if err != nil {
		return err
	}
	for name := range es {
		if strings.HasPrefix(name, multihost.HostPrefix) {
			return fmt.Errorf("%s: %w: %s holds %s, which no host of this conversion made", d.final, ErrForeign, d.Path, name)
		}
	}
	f.placing = true
	return d.place(f.proof, f.fail)
}

// release lets go of the member's journal and locks.
func (m *member) release(d *Dir) {
	if m.released {
		return
	}
	m.released = true
	for _, f := range m.held {
		f.Close()
	}
	if d.p != nil {
		d.p.close()
	}
	if m.lockf != nil {
		m.lockf.Close()
	}
}

// abort ends a member's writing without finishing the output: a sealed share stays for the
// finisher; otherwise the files it made and its journal are removed. Its lock goes too,
// and the partial folder once no member has anything left in it.
func (m *member) abort(d *Dir) {
	if m.released || d.p == nil {
		return
	}
	fo := d.p.fo
	if m.sealed == nil {
		// What could not be removed stays with the journal: a later run removes the rest.
		multihost.Abort(m.ctx, carrier{d}, m.host)
	}
	// The folder stays open (for the removals below) after the locks are let go.
	dup, err := openFolder(fo.path, false)
	m.release(d)
	if err != nil {
		return
	}
	defer dup.close()
	if dup.id.ino != fo.id.ino {
		return
	}
	dup.remove(multihost.Control(m.host, multihost.KindLock), m.lockID)
	for name, id := range m.made {
		dup.remove(name, id)
	}
	dup.removeFolder() // fails, keeping it, while anything is left in it
}
