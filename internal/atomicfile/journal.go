package atomicfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// A journal is how ckpt proves, after a kill, which entries of a partial folder it made:
// one JSON line per event, appended and fsynced as it happens. Its first line identifies
// the journal itself and the partial folder it belongs to by inode, so that a journal
// planted or copied from elsewhere is not taken for ckpt's. Each later line records an
// entry ckpt made with the inode it got when ckpt created it:
//
//	{"ckpt_journal":2,"folder":F,"self":J}           the header
//	{"intent":"a/b.safetensors"}                     a file about to be created
//	{"file":"a/b.safetensors","ino":I}               a file created (being written)
//	{"file":"a/b.safetensors","ino":I,"size":N,"xxhash64":"…"}   that file finished
//	{"dir":"a","ino":I}                              a subfolder made
//	{"control":".ckpt-host-1.lock","ino":I}          a control file made (shared outputs)
//
// An entry is ckpt's only when the journal lists it and it is still that inode, of that
// kind, with one link (a file), of the recorded size (a finished file). Everything else
// in a partial folder is foreign: never removed, never adopted, never written through.
//
// A kill can fall between a file's creation and the record of its inode. The intent line
// written before it covers that window: files are created one at a time, so only the last
// intent not followed by its file's record can be in it (an earlier one is a creation that
// failed — maybe because something was planted at that name). An entry at that one name
// that the journal does not list is ckpt's when it is an empty regular file with one link,
// or a folder on the way to it — a kill there leaves nothing else, and removing it loses
// no bytes.

// journalVersion is the header's ckpt_journal.
const journalVersion = 2

// maxJournal bounds a journal read: two lines of at most a few hundred bytes per file.
const maxJournal = 256 << 20

// maxJournalLine bounds one line (a name is at most a few KiB).
const maxJournalLine = 64 << 10

// record is one journal line.
type record struct {
	Journal  int    `json:"ckpt_journal,omitempty"`
	Folder   uint64 `json:"folder,omitempty"`
	Self     uint64 `json:"self,omitempty"`
	File     string `json:"file,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Control  string `json:"control,omitempty"`
	Intent   string `json:"intent,omitempty"`
	Ino      uint64 `json:"ino,omitempty"`
	Size     int64  `json:"size,omitempty"`
	XXHash64 string `json:"xxhash64,omitempty"`
}

// entry is what a journal says of one name: its inode, and for a finished file its size
// and digest.
type entry struct {
	ino      uint64
	finished bool
	size     int64
	xxhash64 string
}

// journaled is a journal as read: the entries it records, by name.
type journaled struct {
	files    map[string]entry
	dirs     map[string]uint64
	controls map[string]uint64
	// intent is the file a kill may have caught being created: the last intent not
	// followed by the record of its file ("" for none).
	intent string
	// order is the files in the order first recorded.
	order []string
}

// errNotJournal is a journal that ckpt did not write (or not for this folder).
var errNotJournal = errors.New("not a journal ckpt wrote for this folder")

// readJournal reads the journal name of fo: bounded, a regular file only, never waiting;
// every line must be a record ckpt writes, the header naming this folder and this file
// (a last line without its newline is one a kill cut short, and ignored). A missing
// journal reads as none (nil, nil).
func readJournal(fo *folder, name string) (*journaled, ident, error) {
	f, id, _, err := fo.open(name, os.O_RDONLY)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ident{}, nil
		}
		return nil, ident{}, err
	}
	defer f.Close()
	if id.nlink != 1 || id.size > maxJournal {
		return nil, id, fmt.Errorf("%s: %w (%s of %d bytes)", fo.pathOf(name), errNotJournal, id.kind(), id.size)
	}
	j, err := parseJournal(io.LimitReader(f, maxJournal), fo.id.ino, id.ino)
	if err != nil {
		return nil, id, fmt.Errorf("%s: %w: %w", fo.pathOf(name), errNotJournal, err)
	}
	return j, id, nil
}

// parseJournal parses a journal's lines; folder and self are the inodes its header must
// name.
func parseJournal(r io.Reader, folder, self uint64) (*journaled, error) {
	j := &journaled{files: map[string]entry{}, dirs: map[string]uint64{}, controls: map[string]uint64{}}
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			if n == 1 {
				return nil, errors.New("empty")
			}
			return j, nil
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var rec record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil || dec.More() {
			return nil, fmt.Errorf("line %d is not a journal record", n)
		}
		if n == 1 {
			if rec.Journal != journalVersion || rec.Folder != folder || rec.Self != self || rec.File != "" || rec.Dir != "" || rec.Control != "" || rec.Intent != "" || rec.Ino != 0 {
				return nil, errors.New("its header does not name this folder and this journal")
			}
			continue
		}
		if err := j.add(rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
}

// readLine reads one line, without its newline. A last line without a newline (cut short
// by a kill) reads as the end.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxJournalLine {
			return nil, fmt.Errorf("longer than %d bytes", maxJournalLine)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// add takes in one record after the header.
func (j *journaled) add(rec record) error {
	kinds := 0
	for _, s := range []string{rec.File, rec.Dir, rec.Control, rec.Intent} {
		if s != "" {
			kinds++
		}
	}
	if kinds != 1 || (rec.Ino == 0) != (rec.Intent != "") || rec.Journal != 0 || rec.Folder != 0 || rec.Self != 0 {
		return errors.New("not a journal record")
	}
	switch {
	case rec.Intent != "":
		if err := checkName(rec.Intent); err != nil || multihost.IsControl(rec.Intent) || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a name ckpt writes", rec.Intent)
		}
		j.intent = rec.Intent
	case rec.File != "":
		if err := checkName(rec.File); err != nil || multihost.IsControl(rec.File) {
			return fmt.Errorf("%q is not a name ckpt writes", rec.File)
		}
		if rec.Size < 0 || (rec.XXHash64 == "" && rec.Size != 0) {
			return errors.New("not a journal record")
		}
		if _, ok := j.files[rec.File]; !ok {
			j.order = append(j.order, rec.File)
		}
		if rec.File == j.intent {
			j.intent = ""
		}
		j.files[rec.File] = entry{ino: rec.Ino, finished: rec.XXHash64 != "", size: rec.Size, xxhash64: rec.XXHash64}
	case rec.Dir != "":
		if err := checkName(rec.Dir); err != nil || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a name ckpt writes", rec.Dir)
		}
		j.dirs[rec.Dir] = rec.Ino
	default:
		if !multihost.IsControl(rec.Control) || strings.Contains(rec.Control, "/") || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a control file ckpt writes", rec.Control)
		}
		j.controls[rec.Control] = rec.Ino
	}
	return nil
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
	if err := j.write(record{Journal: journalVersion, Folder: fo.id.ino, Self: id.ino}); err != nil {
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
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
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
	return j.write(record{Journal: journalVersion, Folder: fo.id.ino, Self: j.id.ino})
}

func (j *journal) close() {
	if j != nil {
		j.f.Close()
	}
}
