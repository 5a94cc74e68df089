package atomicfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
// journal of the files it started and finished (so a killed member's leftovers are
// resumed or removed, never another member's), and, once all its files are durable, its
// part: the caller's record of what it wrote, renamed into place atomically. The finisher
// refuses to commit a folder holding anything no member journaled.

// memberPrefix starts the names of the members' control files.
const memberPrefix = ".ckpt-host-"

// member is one process's share of a shared output.
type member struct {
	host, hosts int
	lockf       *os.File
	// sealed is the member's part once sealed (by this run or an earlier one).
	sealed []byte
	// held are the other members' lock files the finisher holds while committing.
	held     []*os.File
	released bool
}

func controlName(host int, kind string) string {
	return memberPrefix + strconv.Itoa(host) + "." + kind
}

// startedSize marks a journal line recording that a file was started (not finished).
const startedSize = -1

// JoinDir starts writing the folder path as member host of hosts of a shared output (see
// above), creating the partial folder if no member has yet. The destination must be
// replaceable as for CreateDir (opts.Force, opts.Owner). A member that finished its share
// in an earlier run finds it sealed (Sealed) with its files kept; otherwise the leftovers
// of its own killed run are resumed (opts.Resume: Dir.Resumed lists what it finished) or
// removed (Dir.CleanedUp). A member never touches another member's files.
func JoinDir(path string, opts DirOptions, host, hosts int) (*Dir, error) {
	if hosts < 2 || host < 0 || host >= hosts {
		return nil, fmt.Errorf("%s: member %d of %d", path, host, hosts)
	}
	if err := replaceable(path, opts.Force, opts.Owner); err != nil {
		return nil, err
	}
	if err := checkParent(path); err != nil {
		return nil, err
	}
	m := &member{host: host, hosts: hosts}
	d := &Dir{Path: partialName(path), final: path, opts: opts, member: m}
	// Joined and registered in one step, holding the gate.
	key, err := trackCreate(d.join, func() { m.abort(d) })
	if err != nil {
		return nil, err
	}
	d.key = key
	return d, nil
}

// join makes the partial folder unless another member has, takes this member's lock and
// deals with what an earlier run of it left (sealed, resumed or removed).
func (d *Dir) join() error {
	tmp, m := d.Path, d.member
	if err := os.Mkdir(tmp, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	st, err := os.Lstat(tmp)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is in the way and is not a partial output ckpt wrote", d.final, tmp)
	}
	if _, err := os.Lstat(filepath.Join(tmp, journalName)); err == nil {
		return fmt.Errorf("%s: %s is the partial output of a single-process conversion; finish it (--resume) or remove it first", d.final, tmp)
	}
	lf, err := os.OpenFile(filepath.Join(tmp, controlName(m.host, "lock")), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if lock(lf) != nil {
		lf.Close()
		return fmt.Errorf("%s: host %d: %w", d.final, m.host, ErrBusy)
	}
	m.lockf = lf
	if b, err := os.ReadFile(filepath.Join(tmp, controlName(m.host, "part"))); err == nil {
		m.sealed = b
	} else if err := d.memberLeftovers(); err != nil {
		lf.Close()
		return err
	}
	// A sealed member's journal stays open too: the finisher journals the files it adds.
	if d.journal, err = os.OpenFile(filepath.Join(tmp, controlName(m.host, "journal")), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
		lf.Close()
		return err
	}
	return nil
}

// readJournal reads the member's journal: the files it finished (last record wins) and
// every file it started.
func readJournal(path string) (finished map[string]Journaled, started []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	finished = map[string]Journaled{}
	seen := map[string]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var j Journaled
		if json.Unmarshal(line, &j) != nil || j.File == "" || !filepath.IsLocal(filepath.FromSlash(j.File)) {
			continue // a line cut short by a kill
		}
		if !seen[j.File] {
			seen[j.File] = true
			started = append(started, j.File)
		}
		if j.Size != startedSize {
			finished[j.File] = j
		}
	}
	return finished, started, nil
}

// memberLeftovers deals with what a killed run of this member left: the files it finished
// are resumed (with opts.Resume, when their sizes match) and the rest of the files it
// journaled are removed.
func (d *Dir) memberLeftovers() error {
	jpath := filepath.Join(d.Path, controlName(d.member.host, "journal"))
	finished, started, err := readJournal(jpath)
	if err != nil {
		return err
	}
	if d.opts.Resume {
		d.Resumed = map[string]Journaled{}
	}
	for _, name := range started {
		p := filepath.Join(d.Path, filepath.FromSlash(name))
		if j, ok := finished[name]; ok && d.opts.Resume {
			if st, err := os.Stat(p); err == nil && st.Size() == j.Size {
				d.Resumed[name] = j
				continue
			}
		}
		if err := os.Remove(p); err == nil {
			d.CleanedUp = true
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if d.opts.Resume {
		return nil
	}
	if err := os.Remove(jpath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Started records in a member's journal that it is about to write the file name, so that
// a killed run's leftovers are known to be its own. It does nothing for a plain Dir.
func (d *Dir) Started(name string) error {
	if d.member == nil {
		return nil
	}
	return d.Finished(Journaled{File: name, Size: startedSize})
}

// Sealed returns the part of a member whose share is sealed, by this run or an earlier one.
func (d *Dir) Sealed() ([]byte, bool) {
	if d.member == nil || d.member.sealed == nil {
		return nil, false
	}
	return d.member.sealed, true
}

// Unseal discards a member's sealed share — an earlier run's, of another conversion — so
// that it writes its share anew: the files it journaled and its part are removed.
func (d *Dir) Unseal() error {
	m := d.member
	if m == nil || m.sealed == nil {
		return nil
	}
	jpath := filepath.Join(d.Path, controlName(m.host, "journal"))
	_, started, err := readJournal(jpath)
	if err != nil {
		return err
	}
	for _, name := range started {
		if err := os.Remove(filepath.Join(d.Path, filepath.FromSlash(name))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(filepath.Join(d.Path, controlName(m.host, "part"))); err != nil {
		return err
	}
	d.journal.Close()
	if d.journal, err = os.OpenFile(jpath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600); err != nil {
		return err
	}
	m.sealed, d.Resumed, d.CleanedUp = nil, nil, true
	return nil
}

// Seal ends a member's writing: the files it finished (each fsynced and journaled by the
// caller) are its share, and part — the caller's record of them — is written atomically
// for the finisher. A sealed share is kept when the member aborts.
func (d *Dir) Seal(part []byte) error {
	m := d.member
	if m == nil || d.done || m.sealed != nil {
		return errors.New("atomicfile: Seal is for a member still writing")
	}
	final := filepath.Join(d.Path, controlName(m.host, "part"))
	tmp := final + ".tmp"
	// Holding the gate: once RemovePending has removed this member's files, no part may
	// claim them.
	err := gated(func() error {
		if err := os.WriteFile(tmp, part, 0o600); err != nil {
			return err
		}
		if err := syncPath(tmp); err != nil {
			return err
		}
		return os.Rename(tmp, final)
	})
	if err != nil {
		return err
	}
	if err := syncDir(d.Path); err != nil {
		return err
	}
	m.sealed = part
	return nil
}

// Parts returns every member's part, in member order, nil for those not sealed yet.
func (d *Dir) Parts() ([][]byte, error) {
	m := d.member
	if m == nil {
		return nil, errors.New("atomicfile: Parts is for the members of a shared output")
	}
	out := make([][]byte, m.hosts)
	for h := range m.hosts {
		b, err := os.ReadFile(filepath.Join(d.Path, controlName(h, "part")))
		if err == nil {
			out[h] = b
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return out, nil
}

// sealedExit is how long the finisher waits for a host that sealed its share to let go
// of its lock.
const sealedExit = 30 * time.Second

// prepareCommit readies a shared output for the finisher's commit: every member sealed
// and none still running (the finisher takes their locks), and nothing in the folder that
// no member journaled.
func (m *member) prepareCommit(d *Dir) error {
	if m.host != 0 {
		return fmt.Errorf("%s: host %d cannot finish the output; host 0 does", d.final, m.host)
	}
	allowed := map[string]bool{}
	for h := range m.hosts {
		if h != m.host {
			lf, err := os.OpenFile(filepath.Join(d.Path, controlName(h, "lock")), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				return err
			}
			m.held = append(m.held, lf)
			// A host that sealed its share holds its lock until its process is done:
			// give it a moment (under load, the time between its seal and its exit).
			err = lock(lf)
			if _, serr := os.Stat(filepath.Join(d.Path, controlName(h, "part"))); serr == nil {
				for deadline := time.Now().Add(sealedExit); err != nil && time.Now().Before(deadline); err = lock(lf) {
					time.Sleep(50 * time.Millisecond)
				}
			}
			if err != nil {
				return fmt.Errorf("%s: host %d is still writing (it holds its lock)", d.final, h)
			}
		}
		if _, err := os.Stat(filepath.Join(d.Path, controlName(h, "part"))); err != nil {
			return fmt.Errorf("%s: host %d has not finished its share", d.final, h)
		}
		finished, _, err := readJournal(filepath.Join(d.Path, controlName(h, "journal")))
		if err != nil {
			return err
		}
		for name, j := range finished {
			st, err := os.Stat(filepath.Join(d.Path, filepath.FromSlash(name)))
			if err != nil || st.Size() != j.Size {
				return fmt.Errorf("%s: host %d's %s is not the %d bytes it finished", d.final, h, name, j.Size)
			}
			allowed[name] = true
		}
	}
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return err
	}
	var foreign []string
	for _, e := range entries {
		if !allowed[e.Name()] && !strings.HasPrefix(e.Name(), memberPrefix) {
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%s: %w: %s holds %s, which no host of this conversion wrote", d.final, ErrForeign, d.Path, listNames(foreign))
	}
	return nil
}

// removeControl removes every member's control files before the folder moves into place.
func (m *member) removeControl(d *Dir) error {
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), memberPrefix) {
			if err := os.Remove(filepath.Join(d.Path, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// release lets go of the member's journal and locks.
func (m *member) release(d *Dir) {
	if m.released {
		return
	}
	m.released = true
	if d.journal != nil {
		d.journal.Close()
	}
	for _, f := range m.held {
		f.Close()
	}
	m.lockf.Close()
}

// abort ends a member's writing without finishing the output: a sealed share stays for the
// finisher; otherwise the files it journaled, its journal and its lock are removed, and the
// partial folder too once no member has anything left in it.
func (m *member) abort(d *Dir) {
	if m.released {
		return
	}
	if m.sealed == nil {
		_, started, _ := readJournal(filepath.Join(d.Path, controlName(m.host, "journal")))
		for _, name := range started {
			os.Remove(filepath.Join(d.Path, filepath.FromSlash(name)))
		}
		os.Remove(filepath.Join(d.Path, controlName(m.host, "journal")))
	}
	m.release(d)
	os.Remove(filepath.Join(d.Path, controlName(m.host, "lock")))
	os.Remove(d.Path) // fails, keeping it, while anything is left in it
}
