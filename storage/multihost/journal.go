package multihost

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// A journal is how a host proves, after a kill, which entries of the output it made, and
// which of its files it finished. It is one model (Journal) with two encodings, one per
// kind of carrier:
//
//   - Lines, for a carrier that can append (a file system): one JSON line per event,
//     appended and made durable as it happens. The first line identifies the journal and
//     the folder it belongs to (Header: their inodes), so that a journal planted or copied
//     from elsewhere is not taken for ckpt's, and each later line records an entry with the
//     identity it got when ckpt made it:
//
//     {"ckpt_journal":2,"folder":F,"self":J}           the header
//     {"intent":"a/b.safetensors"}                     a file about to be created
//     {"file":"a/b.safetensors","ino":I}               a file created (being written)
//     {"file":"a/b.safetensors","ino":I,"size":N,"xxhash64":"…"}   that file finished
//     {"dir":"a","ino":I}                              a subfolder made
//     {"control":".ckpt-host-1.lock","ino":I}          a control file made
//
//     A last line without its newline is one a kill cut short, and ignored.
//
//   - List, for a carrier that can only replace an object whole (a bucket): a JSON list of
//     Finished records, the last of each file winning, a file started and not finished
//     with StartedSize and no digest. Each object carries its proof itself (the run).
//
// Either decodes into a Journal; the protocol (protocol.go) reads nothing else.

// Version is a Lines journal's header ckpt_journal.
const Version = 2

// MaxJournal bounds a journal read: two lines (or entries) of at most a few hundred bytes
// per file.
const MaxJournal = 256 << 20

// MaxPart bounds a part read (a host's record of what it wrote).
const MaxPart = 256 << 20

// MaxLine bounds one line of a Lines journal (a name is at most a few KiB).
const MaxLine = 64 << 10

// ErrNotJournal is a journal that ckpt did not write (or not for this output).
var ErrNotJournal = errors.New("not a journal ckpt wrote for this folder")

// Record is one line of a Lines journal.
type Record struct {
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

// Header is the first Record of the Lines journal self of the folder folder (inodes).
func Header(folder, self uint64) Record {
	return Record{Journal: Version, Folder: folder, Self: self}
}

// Line encodes rec as a journal line, its newline included.
func (rec Record) Line() ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Entry is what a journal says of one file: the identity the carrier gave it when ckpt
// made it (0 where objects carry their proof), and for a finished file its size and digest.
type Entry struct {
	ID       uint64
	Finished bool
	Size     int64
	XXHash64 string
}

// Journal is a journal as read: the entries it records, by name.
type Journal struct {
	Files map[string]Entry
	// Dirs and Controls are the subfolders and control files made, with their identities.
	Dirs     map[string]uint64
	Controls map[string]uint64
	// Intent is the file a kill may have caught being created: files are created one at
	// a time, so it is the last intent not followed by the record of its file ("" for
	// none). An earlier intent is a creation that failed — maybe on something planted at
	// that name — and proves nothing.
	Intent string
	// Order is the files in the order first recorded.
	Order []string
}

func newJournal() *Journal {
	return &Journal{Files: map[string]Entry{}, Dirs: map[string]uint64{}, Controls: map[string]uint64{}}
}

// Finished returns the files j records finished, in the order first recorded.
func (j *Journal) Finished() []Finished {
	var out []Finished
	for _, name := range j.Order {
		if e := j.Files[name]; e.Finished {
			out = append(out, Finished{File: name, Size: e.Size, XXHash64: e.XXHash64})
		}
	}
	return out
}

// Entries returns every file j records, in the order first recorded, as a List journal
// holds them (StartedSize for a file not finished).
func (j *Journal) Entries() []Finished {
	out := make([]Finished, 0, len(j.Order))
	for _, name := range j.Order {
		e := j.Files[name]
		if e.Finished {
			out = append(out, Finished{File: name, Size: e.Size, XXHash64: e.XXHash64})
		} else {
			out = append(out, Finished{File: name, Size: StartedSize})
		}
	}
	return out
}

// ValidName reports whether name is a file name inside an output folder: slash-separated,
// no empty, "." or ".." element, not absolute.
func ValidName(name string) bool {
	return name != "." && fs.ValidPath(name)
}

// ParseLines parses a Lines journal: folder and self are the identities its header must
// name, valid the carrier's check of a name inside the folder (ValidName, or stricter).
// Every line must be a record ckpt writes; the read is bounded by MaxJournal and each line
// by MaxLine. An empty journal, or one whose header names another folder or file, is an
// error.
func ParseLines(r io.Reader, folder, self uint64, valid func(string) bool) (*Journal, error) {
	j := newJournal()
	br := bufio.NewReaderSize(io.LimitReader(r, MaxJournal), 1<<16)
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
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil || dec.More() {
			return nil, fmt.Errorf("line %d is not a journal record", n)
		}
		if n == 1 {
			if rec != Header(folder, self) {
				return nil, errors.New("its header does not name this folder and this journal")
			}
			continue
		}
		if err := j.add(rec, valid); err != nil {
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
		if len(line) > MaxLine {
			return nil, fmt.Errorf("longer than %d bytes", MaxLine)
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
func (j *Journal) add(rec Record, valid func(string) bool) error {
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
		if !valid(rec.Intent) || IsControl(rec.Intent) || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a name ckpt writes", rec.Intent)
		}
		j.Intent = rec.Intent
	case rec.File != "":
		if !valid(rec.File) || IsControl(rec.File) {
			return fmt.Errorf("%q is not a name ckpt writes", rec.File)
		}
		if rec.Size < 0 || (rec.XXHash64 == "" && rec.Size != 0) {
			return errors.New("not a journal record")
		}
		if _, ok := j.Files[rec.File]; !ok {
			j.Order = append(j.Order, rec.File)
		}
		if rec.File == j.Intent {
			j.Intent = ""
		}
		j.Files[rec.File] = Entry{ID: rec.Ino, Finished: rec.XXHash64 != "", Size: rec.Size, XXHash64: rec.XXHash64}
	case rec.Dir != "":
		if !valid(rec.Dir) || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a name ckpt writes", rec.Dir)
		}
		j.Dirs[rec.Dir] = rec.Ino
	default:
		if !IsControl(rec.Control) || strings.Contains(rec.Control, "/") || rec.Size != 0 || rec.XXHash64 != "" {
			return fmt.Errorf("%q is not a control file ckpt writes", rec.Control)
		}
		j.Controls[rec.Control] = rec.Ino
	}
	return nil
}

// maxName bounds a name in a List journal (a bucket's keys are at most 1 KiB).
const maxName = 1024

// ParseList parses a List journal: a JSON list of files, each named inside the folder,
// with a size (StartedSize while unfinished) and, once finished, an xxhash64 in 16
// lower-case hex digits. The last entry of a file wins.
func ParseList(b []byte) (*Journal, error) {
	if len(b) > MaxJournal {
		return nil, fmt.Errorf("%w: %d bytes, more than a journal has", ckpterr.ErrCorrupt, len(b))
	}
	var list []Finished
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	j := newJournal()
	for _, e := range list {
		if len(e.File) > maxName || !ValidName(e.File) || IsControl(e.File) {
			return nil, fmt.Errorf("%w: the journal names %q", ckpterr.ErrCorrupt, e.File)
		}
		finished := e.Size >= 0 && len(e.XXHash64) == 16 && strings.Trim(e.XXHash64, "0123456789abcdef") == ""
		if !finished && (e.Size != StartedSize || e.XXHash64 != "") {
			return nil, fmt.Errorf("%w: the journal's entry of %q has size %d, xxhash64 %q", ckpterr.ErrCorrupt, e.File, e.Size, e.XXHash64)
		}
		if _, ok := j.Files[e.File]; !ok {
			j.Order = append(j.Order, e.File)
		}
		en := Entry{Finished: finished, Size: e.Size, XXHash64: e.XXHash64}
		if !finished {
			en.Size = 0
		}
		j.Files[e.File] = en
	}
	return j, nil
}

// MarshalList encodes entries (in the order started, StartedSize while unfinished) as a
// List journal.
func MarshalList(entries []Finished) ([]byte, error) {
	if entries == nil {
		entries = []Finished{}
	}
	return json.Marshal(entries)
}
