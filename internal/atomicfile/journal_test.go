package atomicfile

import (
	"bytes"
	"io/fs"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// TestParseJournal: only lines ckpt writes are accepted, after a header naming this folder
// and this journal; a last line without its newline (cut short by a kill) is ignored.
func TestParseJournal(t *testing.T) {
	const head = `{"ckpt_journal":2,"folder":7,"self":9}` + "\n"
	for _, c := range []struct {
		name, text string
		ok         bool
		files      int
	}{
		{"header only", head, true, 0},
		{"a file made and finished", head + `{"file":"a/b","ino":3}` + "\n" + `{"file":"a/b","ino":3,"size":4,"xxhash64":"0123456789abcdef"}` + "\n" + `{"dir":"a","ino":2}` + "\n", true, 1},
		{"a line cut short", head + `{"file":"a","ino":3}` + "\n" + `{"file":"b","in`, true, 1},
		{"empty", "", false, 0},
		{"another folder's", `{"ckpt_journal":2,"folder":8,"self":9}` + "\n", false, 0},
		{"a copy", `{"ckpt_journal":2,"folder":7,"self":10}` + "\n", false, 0},
		{"no header", `{"file":"a","ino":3}` + "\n", false, 0},
		{"an older journal", `{"file":"a","size":-1}` + "\n", false, 0},
		{"a name outside", head + `{"file":"../x","ino":3}` + "\n", false, 0},
		{"an absolute name", head + `{"file":"/etc/passwd","ino":3}` + "\n", false, 0},
		{"a dot name", head + `{"dir":".","ino":3}` + "\n", false, 0},
		{"a control name as a file", head + `{"file":".ckpt-journal","ino":3}` + "\n", false, 0},
		{"a control with a folder", head + `{"control":".ckpt-host-1/x","ino":3}` + "\n", false, 0},
		{"not a control", head + `{"control":"model.safetensors","ino":3}` + "\n", false, 0},
		{"no inode", head + `{"file":"a"}` + "\n", false, 0},
		{"two kinds", head + `{"file":"a","dir":"b","ino":3}` + "\n", false, 0},
		{"a size without a digest", head + `{"file":"a","ino":3,"size":5}` + "\n", false, 0},
		{"a negative size", head + `{"file":"a","ino":3,"size":-1,"xxhash64":"0"}` + "\n", false, 0},
		{"an unknown field", head + `{"file":"a","ino":3,"mode":7}` + "\n", false, 0},
		{"garbage", head + "rm -rf /\n", false, 0},
		{"two values on a line", head + `{"file":"a","ino":3}{"file":"b","ino":4}` + "\n", false, 0},
		{"a second header", head + head, false, 0},
		{"a huge line", head + strings.Repeat("x", maxJournalLine+1) + "\n", false, 0},
	} {
		j, err := parseJournal(strings.NewReader(c.text), 7, 9)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if c.ok && len(j.files) != c.files {
			t.Errorf("%s: %d files, want %d", c.name, len(j.files), c.files)
		}
	}
}

// FuzzJournal: any bytes parse or fail cleanly, and what is accepted names only entries
// inside the folder: no "..", nothing absolute, no control file taken for an output file.
func FuzzJournal(f *testing.F) {
	const head = `{"ckpt_journal":2,"folder":7,"self":9}` + "\n"
	f.Add([]byte(head + `{"file":"a/b","ino":3}` + "\n" + `{"file":"a/b","ino":3,"size":4,"xxhash64":"0123456789abcdef"}` + "\n" + `{"dir":"a","ino":2}` + "\n"))
	f.Add([]byte(head + `{"control":".ckpt-host-1.lock","ino":3}` + "\n" + `{"file":"x","in`))
	f.Add([]byte(head + `{"file":"../x","ino":3}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := parseJournal(bytes.NewReader(b), 7, 9)
		if err != nil {
			return
		}
		for name, e := range j.files {
			if !fs.ValidPath(name) || name == "." || multihost.IsControl(name) || e.ino == 0 || e.size < 0 || (e.finished && e.xxhash64 == "") {
				t.Fatalf("accepted file %q %+v", name, e)
			}
		}
		for name, ino := range j.dirs {
			if !fs.ValidPath(name) || name == "." || ino == 0 {
				t.Fatalf("accepted folder %q", name)
			}
		}
		for name := range j.controls {
			if !multihost.IsControl(name) || strings.Contains(name, "/") {
				t.Fatalf("accepted control %q", name)
			}
		}
		if len(j.order) != len(j.files) {
			t.Fatalf("order %v, files %d", j.order, len(j.files))
		}
	})
}
