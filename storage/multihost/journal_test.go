package multihost

import (
	"bytes"
	"strings"
	"testing"
)

// TestParseLines: only lines ckpt writes are accepted, after a header naming this folder
// and this journal; a last line without its newline (cut short by a kill) is ignored.
func TestParseLines(t *testing.T) {
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
		{"a huge line", head + strings.Repeat("x", MaxLine+1) + "\n", false, 0},
	} {
		j, err := ParseLines(strings.NewReader(c.text), 7, 9, ValidName)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if c.ok && len(j.Files) != c.files {
			t.Errorf("%s: %d files, want %d", c.name, len(j.Files), c.files)
		}
	}
}

// FuzzJournal: any bytes parse as a Lines journal or fail cleanly, and what is accepted
// names only entries inside the folder: no "..", nothing absolute, no control file taken
// for an output file.
func FuzzJournal(f *testing.F) {
	const head = `{"ckpt_journal":2,"folder":7,"self":9}` + "\n"
	f.Add([]byte(head + `{"file":"a/b","ino":3}` + "\n" + `{"file":"a/b","ino":3,"size":4,"xxhash64":"0123456789abcdef"}` + "\n" + `{"dir":"a","ino":2}` + "\n"))
	f.Add([]byte(head + `{"control":".ckpt-host-1.lock","ino":3}` + "\n" + `{"file":"x","in`))
	f.Add([]byte(head + `{"file":"../x","ino":3}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := ParseLines(bytes.NewReader(b), 7, 9, ValidName)
		if err != nil {
			return
		}
		for name, e := range j.Files {
			if !ValidName(name) || IsControl(name) || e.ID == 0 || e.Size < 0 || (e.Finished && e.XXHash64 == "") {
				t.Fatalf("accepted file %q %+v", name, e)
			}
		}
		for name, ino := range j.Dirs {
			if !ValidName(name) || ino == 0 {
				t.Fatalf("accepted folder %q", name)
			}
		}
		for name := range j.Controls {
			if !IsControl(name) || strings.Contains(name, "/") {
				t.Fatalf("accepted control %q", name)
			}
		}
		if len(j.Order) != len(j.Files) {
			t.Fatalf("order %v, files %d", j.Order, len(j.Files))
		}
	})
}

// TestParseList: a List journal (a bucket's) names files inside the folder, each started
// (StartedSize, no digest) or finished (a size and 16 hex digits), the last entry of a
// file winning.
func TestParseList(t *testing.T) {
	for _, c := range []struct {
		name, text string
		ok         bool
		finished   int
	}{
		{"started then finished", `[{"file":"a","size":-1,"xxhash64":""},{"file":"a","size":12,"xxhash64":"0123456789abcdef"},{"file":"b","size":-1}]`, true, 1},
		{"null", `null`, true, 0},
		{"an object", `{}`, false, 0},
		{"cut short", `[`, false, 0},
		{"a name outside", `[{"file":"../x","size":1,"xxhash64":"0123456789abcdef"}]`, false, 0},
		{"an empty element", `[{"file":"a//b","size":-1}]`, false, 0},
		{"a control name", `[{"file":".ckpt-host-0.journal","size":-1}]`, false, 0},
		{"a size below started", `[{"file":"a","size":-2}]`, false, 0},
		{"a digest too short", `[{"file":"a","size":1,"xxhash64":"0123"}]`, false, 0},
		{"upper-case hex", `[{"file":"a","size":1,"xxhash64":"0123456789ABCDEF"}]`, false, 0},
		{"a started file with a digest", `[{"file":"a","size":-1,"xxhash64":"0123456789abcdef"}]`, false, 0},
		{"a name too long", `[{"file":"` + strings.Repeat("a", 1025) + `","size":-1}]`, false, 0},
	} {
		j, err := ParseList([]byte(c.text))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if c.ok && len(j.Finished()) != c.finished {
			t.Errorf("%s: %d finished, want %d", c.name, len(j.Finished()), c.finished)
		}
	}
}

// FuzzParseJournal: a host's List journal, as anyone with write access to the prefix
// could leave it, parses without a panic, and what it accepts names only files inside the
// folder, each started or finished with a digest, and survives a round trip.
func FuzzParseJournal(f *testing.F) {
	for _, s := range []string{
		`[{"file":"__0_0.distcp","size":-1,"xxhash64":""},{"file":"__0_0.distcp","size":12,"xxhash64":"0123456789abcdef"}]`,
		`[{"file":"../x","size":1,"xxhash64":"0123456789abcdef"}]`,
		`[{"file":"a//b","size":-1}]`, `[{"file":"a","size":-2}]`, `null`, `{}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := ParseList(b)
		if err != nil {
			return
		}
		for _, e := range j.Entries() {
			if !ValidName(e.File) || strings.HasPrefix(e.File, "/") || strings.Contains("/"+e.File+"/", "/../") || IsControl(e.File) {
				t.Fatalf("accepted the name %q", e.File)
			}
			if e.Size != StartedSize && len(e.XXHash64) != 16 {
				t.Fatalf("accepted a finished entry without a digest: %+v", e)
			}
		}
		again, err := MarshalList(j.Entries())
		if err != nil {
			t.Fatal(err)
		}
		k, err := ParseList(again)
		if err != nil {
			t.Fatalf("its own output is refused: %v", err)
		}
		if len(k.Order) != len(j.Order) || len(k.Finished()) != len(j.Finished()) {
			t.Fatalf("a round trip changed %v into %v", j.Entries(), k.Entries())
		}
	})
}
