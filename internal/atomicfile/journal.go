package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// A journal is how ckpt proves, after a kill, which entries of a partial folder it made:
// one JSON line per event, appended and fsynced as it happens (multihost's Lines encoding:
// see storage/multihost/journal.go). Its header names the journal itself and the partial
// folder by inode, and each later line an entry ckpt made with the inode it got when ckpt
// created it. An entry is ckpt's only when the journal lists it and it is still that
// inode, of that kind, with one link (a file), of the recorded size (a finished file).
// Everything else in a partial folder is foreign: never removed, never adopted, never
// written through.
//
// A kill can fall between a file's creation and the record of its inode. The intent line
// written before it covers that window: files are created one at a time, so only the last
// intent not followed by its file's record can be in it (an earlier one is a creation that
// failed — maybe because something was planted at that name). An entry at that one name
// that the journal does not list is ckpt's when it is an empty regular file with one link,
// or a folder on the way to it — a kill there leaves nothing else, and removing it loses
// no bytes.

// record is one journal line.
type record = multihost.Record

// journaled is a journal as read: the entries it records, by name.
type journaled = multihost.Journal

// errNotJournal is a journal that ckpt did not write (or not for this folder).
var errNotJournal = multihost.ErrNotJournal

// validName is the journal's check of a name inside the folder (checkName's).
func validName(name string) bool { return checkName(name) == nil }

// readJournal reads the journal name of fo: bounded, a regular file only, never waiting;
// every line must be a record ckpt writes, the header naming this folder and this file
// (multihost.ParseLines). A missing journal reads as none (nil, nil).
func readJournal(fo *folder, name string) (*journaled, ident, error) {
	f, id, _, err := fo.open(name, os.O_RDONLY)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ident{}, nil
		}
		return nil, ident{}, err
	}
	defer f.Close()
	if id.nlink != 1 || id.size > multihost.MaxJournal {
		return nil, id, fmt.Errorf("%s: %w (%s of %d bytes)", fo.pathOf(name), errNotJournal, id.kind(), id.size)
	}
	j, err := multihost.ParseLines(f, fo.id.ino, id.ino, validName)
	if err != nil {
		return nil, id, fmt.Errorf("%s: %w: %w", fo.pathOf(name), errNotJournal, err)
	}
	return j, id, nil
}

// journal is a journal open for appending.
type journal struct {
	mu sync.Mutex
	f  *os.File
	id ident
}

// newJournal creates the journal name in fo and writes its header.
func newJournal(fo *folder, name string) (*journal, error) {
	f, id, err := fo.create(name, 0o600, nil)
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, id: id}
	if err := j.write(multihost.Header(fo.id.ino, id.ino)); err != nil {
		f.Close()
		fo.remove(name, id)
		return nil, err
	}
	return j, nil
}

// appendJournal opens the existing journal name of fo (read and checked by readJournal as
// id) for appending.
func appendJournal(fo *folder, name string, id ident) (*journal, error) {
	f, got, _, err := fo.open(name, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, err
	}
	if got.ino != id.ino || got.nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("%s: %w", fo.pathOf(name), errNotJournal)
	}
	return &journal{f: f, id: got}, nil
}

// write appends rec and makes it durable.
func (j *journal) write(rec record) error {
	b, err := rec.Line()
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(b); err != nil {
		return err
	}
	return j.f.Sync()
}

// truncate empties the journal but for a new header (fo's).
func (j *journal) truncate(fo *folder) error {
	j.mu.Lock()
	err := j.f.Truncate(0)
	j.mu.Unlock()
	if err != nil {
		return err
	}
	return j.write(multihost.Header(fo.id.ino, j.id.ino))
}

func (j *journal) close() {
	if j != nil {
		j.f.Close()
	}
}
