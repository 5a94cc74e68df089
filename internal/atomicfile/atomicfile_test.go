package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/fifotest"

	"github.com/ckpt-dev/ckpt/storage/multihost"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestFile: nothing appears under the final name until Commit; Abort leaves nothing; an
// existing file is kept without force and replaced with it.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.pt")
	f, err := Create(bg, dst, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("half")
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("final name exists before Commit")
	}
	f.Abort()
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("Abort left %v", got)
	}
	f, _ = Create(bg, dst, FileOptions{})
	f.WriteString("v1")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // no effect after Commit
	if _, err := Create(bg, dst, FileOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrote without force: %v", err)
	}
	f, _ = Create(bg, dst, FileOptions{Force: true})
	f.WriteString("v2")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "v2" {
		t.Fatalf("content %q", b)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left %v", got)
	}
}

// TestDir: a folder output replaces an existing one only when complete, and only one whose
// every entry the owner claims; an empty folder is replaced without force.
func TestDir(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "hf")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := CreateDir(bg, dst, DirOptions{})
	if err != nil {
		t.Fatalf("an empty folder: %v", err)
	}
	writeFile(t, d, "old", "x")
	if err := d.Commit(bg); err != nil {
		t.Fatal(err)
	}
	owner := claimed(map[string]string{"old": "x"})
	if _, err := CreateDir(bg, dst, DirOptions{Owner: owner}); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrote without force: %v", err)
	}
	// Without force, the refusal of what force would refuse too says why, the first time.
	if _, err := CreateDir(bg, dst, DirOptions{}); !errors.Is(err, ErrForeign) || errors.Is(err, ErrExists) {
		t.Fatalf("no owner, without force: %v", err)
	}
	if _, err := CreateDir(bg, dst, DirOptions{Owner: claimed(map[string]string{"old": "xx"})}); !errors.Is(err, ErrForeign) {
		t.Fatalf("a size the owner does not record, without force: %v", err)
	}
	d, err = CreateDir(bg, dst, DirOptions{Force: true, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d, "model.safetensors", "y")
	if got := entries(t, dst); len(got) != 1 || got[0] != "old" {
		t.Fatalf("destination changed before Commit: %v", got)
	}
	if err := d.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dst); len(got) != 1 || got[0] != "model.safetensors" {
		t.Fatalf("after Commit: %v", got)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("leftovers: %v", got)
	}
	d, _ = CreateDir(bg, filepath.Join(dir, "other"), DirOptions{})
	d.Abort()
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("Abort left %v", got)
	}
}

// TestDirKeepsForeign: with force, a folder holding anything the owner does not claim
// (a file, a subfolder, a link) is refused naming it, before and at Commit, and nothing of
// it is touched.
func TestDirKeepsForeign(t *testing.T) {
	ours := claimed(map[string]string{"model.safetensors": "x", "ckpt-manifest.json": ""})
	old := claimed(map[string]string{"model.safetensors": "old"})
	notOurs := func(string) ([]Journaled, bool) { return nil, false }
	cases := []struct {
		name  string
		make  func(dst string)
		owner Owner
	}{
		{"no manifest", func(dst string) { os.WriteFile(filepath.Join(dst, "model.safetensors"), []byte("x"), 0o644) }, notOurs},
		{"nil owner", func(dst string) { os.WriteFile(filepath.Join(dst, "model.safetensors"), []byte("x"), 0o644) }, nil},
		{"unlisted file", func(dst string) { os.WriteFile(filepath.Join(dst, "notes.txt"), []byte("x"), 0o644) }, ours},
		{"subfolder", func(dst string) {
			os.MkdirAll(filepath.Join(dst, "llama"), 0o755)
			os.WriteFile(filepath.Join(dst, "llama", "keep.bin"), []byte("x"), 0o644)
		}, ours},
		{"listed name is a folder", func(dst string) { os.MkdirAll(filepath.Join(dst, "model.safetensors"), 0o755) }, ours},
		{"link", func(dst string) { os.Symlink("/etc/passwd", filepath.Join(dst, "model.safetensors")) }, ours},
		// A forged manifest listing a user's file: its bytes are not what it records.
		{"listed file of other bytes", func(dst string) { os.WriteFile(filepath.Join(dst, "model.safetensors"), []byte("y"), 0o644) }, ours},
		{"listed file of another size", func(dst string) { os.WriteFile(filepath.Join(dst, "model.safetensors"), []byte("mine"), 0o644) }, ours},
		{"listed name is a FIFO", func(dst string) { fifotest.Make(t, filepath.Join(dst, "model.safetensors")) }, ours},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			os.Mkdir(dst, 0o755)
			c.make(dst)
			before := entries(t, dst)
			if _, err := CreateDir(bg, dst, DirOptions{Force: true, Owner: c.owner}); !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), before[0]) {
				t.Fatalf("CreateDir: %v, want ErrForeign naming %s", err, before[0])
			}
			if got := entries(t, dst); strings.Join(got, ",") != strings.Join(before, ",") {
				t.Fatalf("destination changed: %v → %v", before, got)
			}
		})
	}
	// A foreign file arriving while the output is written is found at Commit.
	dst := filepath.Join(t.TempDir(), "out")
	os.Mkdir(dst, 0o755)
	os.WriteFile(filepath.Join(dst, "model.safetensors"), []byte("old"), 0o644)
	d, err := CreateDir(bg, dst, DirOptions{Force: true, Owner: old})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d, "model.safetensors", "new")
	os.WriteFile(filepath.Join(dst, "arrived.txt"), []byte("x"), 0o644)
	if err := d.Commit(bg); !errors.Is(err, ErrForeign) {
		t.Fatalf("Commit: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "model.safetensors")); string(b) != "old" {
		t.Fatalf("replaced: %q", b)
	}
	if got := entries(t, filepath.Dir(dst)); len(got) != 1 {
		t.Fatalf("leftovers: %v", got)
	}
}

// TestFileNeverReplacesFolder: a file output refuses an existing folder, even with force.
func TestFileNeverReplacesFolder(t *testing.T) {
	dst := t.TempDir()
	if _, err := Create(bg, dst, FileOptions{Force: true}); !errors.Is(err, ErrIsFolder) {
		t.Fatalf("Create over a folder: %v", err)
	}
}

// TestModes: committed outputs get the modes the umask gives new files and folders, as cp
// does, however private the temporary ones were.
func TestModes(t *testing.T) {
	want := umask()
	dir := t.TempDir()
	f, err := Create(bg, filepath.Join(dir, "f.pt"), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	d, err := CreateDir(bg, filepath.Join(dir, "d"), DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(bg); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"f.pt": 0o666 &^ want, "d": 0o777 &^ want} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v (umask %03o)", name, st.Mode().Perm(), mode, want)
		}
	}
}

// TestRemovePending: outputs being written are removed (files and folders), committed
// ones are not, and a Commit after the removal fails instead of producing an output.
func TestRemovePending(t *testing.T) {
	restart(t)
	dir := t.TempDir()
	done, err := Create(bg, filepath.Join(dir, "done.pt"), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Commit(); err != nil {
		t.Fatal(err)
	}
	f, _ := Create(bg, filepath.Join(dir, "half.pt"), FileOptions{})
	f.WriteString("half")
	d, _ := CreateDir(bg, filepath.Join(dir, "folder"), DirOptions{})
	writeFile(t, d, "model.safetensors", "x")
	if n := RemovePending(); n != 2 {
		t.Errorf("RemovePending removed %d outputs, want 2", n)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "done.pt" {
		t.Fatalf("left %v, want only done.pt", got)
	}
	if f.Commit() == nil || d.Commit(bg) == nil {
		t.Fatal("Commit after RemovePending succeeded")
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left %v after the failed Commits", got)
	}
	if n := RemovePending(); n != 0 {
		t.Errorf("%d outputs still pending", n)
	}
	// Nothing can be started or written into any more: the process is about to exit.
	if _, err := d.Create("model.safetensors"); !errors.Is(err, ErrInterrupted) {
		t.Errorf("Dir.Create after RemovePending: %v, want ErrInterrupted", err)
	}
	if _, err := Create(bg, filepath.Join(dir, "late.pt"), FileOptions{}); !errors.Is(err, ErrInterrupted) {
		t.Errorf("Create after RemovePending: %v, want ErrInterrupted", err)
	}
	if _, err := CreateDir(bg, filepath.Join(dir, "late"), DirOptions{}); !errors.Is(err, ErrInterrupted) {
		t.Errorf("CreateDir after RemovePending: %v, want ErrInterrupted", err)
	}
	if _, err := JoinDir(bg, filepath.Join(dir, "shared"), DirOptions{}, 0, 2); !errors.Is(err, ErrInterrupted) {
		t.Errorf("JoinDir after RemovePending: %v, want ErrInterrupted", err)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left %v after starting outputs once interrupted", got)
	}
}

// restart lets outputs be written again after a test's RemovePending, which stops them
// for good in a real process.
func restart(t *testing.T) {
	t.Cleanup(func() {
		pending.Lock()
		pending.stopped = false
		pending.Unlock()
	})
}

// TestRemovePendingRacesWriter interrupts a writer creating files (in subfolders) in a
// folder output at many points: whenever RemovePending runs, the partial folder is gone
// afterwards — the writer, running on, never makes it again.
func TestRemovePendingRacesWriter(t *testing.T) {
	for i := range 200 {
		restart(t)
		dir := t.TempDir()
		d, err := CreateDir(bg, filepath.Join(dir, "out"), DirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			for k := 0; ; k++ {
				f, err := d.Create(fmt.Sprintf("sub%d/%d.safetensors", k%3, k))
				if err != nil {
					done <- err
					return
				}
				f.WriteString("x")
				f.Close()
			}
		}()
		time.Sleep(time.Duration(i%20) * 10 * time.Microsecond)
		RemovePending()
		if err := <-done; !errors.Is(err, ErrInterrupted) {
			t.Fatalf("run %d: the writer stopped on %v, want ErrInterrupted", i, err)
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Fatalf("run %d: left %v", i, got)
		}
		pending.Lock()
		pending.stopped = false
		pending.Unlock()
	}
}

// TestCommitAll: a file and its manifest go into place together; when the second cannot
// (a folder is in its way), the first is taken back out, and after RemovePending neither
// is committed.
func TestCommitAll(t *testing.T) {
	restart(t)
	dir := t.TempDir()
	start := func(names ...string) []*File {
		var fs []*File
		for _, n := range names {
			f, err := Create(bg, filepath.Join(dir, n), FileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(n)
			fs = append(fs, f)
		}
		return fs
	}
	if err := CommitAll(start("a.pt", "a.pt.ckpt-manifest.json")...); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); strings.Join(got, " ") != "a.pt a.pt.ckpt-manifest.json" {
		t.Fatalf("after CommitAll: %v", got)
	}
	b := start("b.pt", "b.pt.ckpt-manifest.json")
	os.Mkdir(filepath.Join(dir, "b.pt.ckpt-manifest.json"), 0o755)
	if err := CommitAll(b...); !errors.Is(err, ErrIsFolder) {
		t.Fatalf("CommitAll onto a folder: %v, want ErrIsFolder", err)
	}
	if got := entries(t, dir); strings.Join(got, " ") != "a.pt a.pt.ckpt-manifest.json b.pt.ckpt-manifest.json" {
		t.Fatalf("after the failed CommitAll: %v", got)
	}
	fs := start("c.pt", "c.pt.ckpt-manifest.json")
	RemovePending()
	if err := CommitAll(fs...); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("CommitAll after RemovePending: %v, want ErrInterrupted", err)
	}
	if got := entries(t, dir); len(got) != 3 {
		t.Fatalf("after the interrupted CommitAll: %v", got)
	}
}

// TestMissingParent: an output in a folder that does not exist is refused naming the folder.
func TestMissingParent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := Create(bg, filepath.Join(dir, "out.pt"), FileOptions{}); err == nil || !strings.Contains(err.Error(), "the folder "+dir+" does not exist") {
		t.Errorf("Create: %v", err)
	}
	if _, err := CreateDir(bg, filepath.Join(dir, "out"), DirOptions{}); err == nil || !strings.Contains(err.Error(), "the folder "+dir+" does not exist") {
		t.Errorf("CreateDir: %v", err)
	}
}

// TestRemovePendingKeepsPlanted: an interrupted output removes only what it made: a link
// planted beside its files, a file put in place of one of its own and a folder made where
// it would write stay, and what the links lead to is untouched (issue 29, class 2).
func TestRemovePendingKeepsPlanted(t *testing.T) {
	restart(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim.txt")
	os.WriteFile(victim, []byte("VICTIM"), 0o644)
	d, err := CreateDir(bg, filepath.Join(base, "out"), DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d, "a.safetensors", "a")
	writeFile(t, d, "sub/b.safetensors", "b")
	writeFile(t, d, "c.safetensors", "c")
	os.Symlink(victim, filepath.Join(d.Path, "link"))
	os.Remove(filepath.Join(d.Path, "c.safetensors"))
	os.Link(victim, filepath.Join(d.Path, "c.safetensors"))
	os.Mkdir(filepath.Join(d.Path, "sub", "planted"), 0o755)
	f, err := Create(bg, filepath.Join(base, "f.pt"), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("half")
	os.Symlink(victim, filepath.Join(base, ".f.pt.partial", "beside"))
	if n := RemovePending(); n != 2 {
		t.Errorf("RemovePending removed %d outputs, want 2", n)
	}
	if got := entries(t, d.Path); strings.Join(got, " ") != "c.safetensors link sub" {
		t.Errorf("left in the partial folder: %v, want the plants alone", got)
	}
	if got := entries(t, filepath.Join(d.Path, "sub")); strings.Join(got, " ") != "planted" {
		t.Errorf("left in sub: %v", got)
	}
	if got := entries(t, filepath.Join(base, ".f.pt.partial")); strings.Join(got, " ") != "beside" {
		t.Errorf("left in the file's partial folder: %v", got)
	}
	if b, _ := os.ReadFile(victim); string(b) != "VICTIM" {
		t.Errorf("the victim changed: %q", b)
	}
}

// TestLeftoverProven: a killed run's partial folder is resumed or removed only as far as
// its journal proves ckpt made each entry; a link, hard link, FIFO or folder in the place
// of a file it made, or anything beside, makes the next run refuse with nothing touched.
func TestLeftoverProven(t *testing.T) {
	kill := func(t *testing.T, dst string) *Dir {
		d, err := CreateDir(bg, dst, DirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "a.safetensors", "aaaa")
		writeFile(t, d, "sub/b.safetensors", "bb")
		f, _ := d.Create("c.safetensors")
		f.WriteString("c")
		f.Close()
		// Killed: the lock goes with the process, everything else stays.
		d.p.fo.close()
		d.p.j.close()
		untrack(d.key)
		return d
	}
	t.Run("removed", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "out")
		kill(t, dst)
		d, err := CreateDir(bg, dst, DirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !d.CleanedUp || len(entries(t, d.Path)) != 1 {
			t.Fatalf("cleaned %v, left %v", d.CleanedUp, entries(t, d.Path))
		}
		d.Abort()
	})
	t.Run("resumed", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "out")
		kill(t, dst)
		d, err := CreateDir(bg, dst, DirOptions{Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Resumed) != 2 || d.Resumed["sub/b.safetensors"].Size != 2 {
			t.Fatalf("resumed %v", d.Resumed)
		}
		if got := entries(t, d.Path); strings.Join(got, " ") != ".ckpt-journal a.safetensors sub" {
			t.Fatalf("left %v", got)
		}
		f, err := d.Open("a.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		d.Abort()
	})
	base := t.TempDir()
	victim := filepath.Join(base, "victim.txt")
	os.WriteFile(victim, []byte("VICTIM"), 0o644)
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, partial string)
	}{
		{"link in place of a finished file", func(t *testing.T, p string) {
			os.Remove(filepath.Join(p, "a.safetensors"))
			os.Symlink(victim, filepath.Join(p, "a.safetensors"))
		}},
		{"hard link in place of a finished file", func(t *testing.T, p string) {
			os.Remove(filepath.Join(p, "a.safetensors"))
			os.Link(victim, filepath.Join(p, "a.safetensors"))
		}},
		{"link in place of a file being written", func(t *testing.T, p string) {
			os.Remove(filepath.Join(p, "c.safetensors"))
			os.Symlink(victim, filepath.Join(p, "c.safetensors"))
		}},
		{"FIFO in place of a file", func(t *testing.T, p string) {
			os.Remove(filepath.Join(p, "c.safetensors"))
			fifotest.Make(t, filepath.Join(p, "c.safetensors"))
		}},
		{"link in place of a subfolder", func(t *testing.T, p string) {
			os.RemoveAll(filepath.Join(p, "sub"))
			os.Symlink(base, filepath.Join(p, "sub"))
		}},
		{"a file beside", func(t *testing.T, p string) { os.WriteFile(filepath.Join(p, "notes.txt"), []byte("x"), 0o644) }},
		{"a link in a subfolder", func(t *testing.T, p string) { os.Symlink(victim, filepath.Join(p, "sub", "x")) }},
		{"journal is a link", func(t *testing.T, p string) {
			os.Rename(filepath.Join(p, multihost.SingleJournal), filepath.Join(base, "moved-journal"))
			os.Symlink(filepath.Join(base, "moved-journal"), filepath.Join(p, multihost.SingleJournal))
		}},
		{"journal is a copy", func(t *testing.T, p string) {
			b, _ := os.ReadFile(filepath.Join(p, multihost.SingleJournal))
			os.WriteFile(filepath.Join(p, "copy"), b, 0o600) // a new inode, while the old one lives
			os.Rename(filepath.Join(p, "copy"), filepath.Join(p, multihost.SingleJournal))
		}},
	} {
		for _, resume := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/resume=%v", c.name, resume), func(t *testing.T) {
				dst := filepath.Join(t.TempDir(), "out")
				d := kill(t, dst)
				c.plant(t, d.Path)
				before := tree(t, filepath.Dir(dst))
				victimBefore := tree(t, base)
				_, err := CreateDir(bg, dst, DirOptions{Resume: resume})
				if !errors.Is(err, ErrForeign) {
					t.Fatalf("CreateDir: %v, want ErrForeign", err)
				}
				if after := tree(t, filepath.Dir(dst)); after != before {
					t.Errorf("the partial folder changed:\n%s\n→\n%s", before, after)
				}
				if after := tree(t, base); after != victimBefore {
					t.Errorf("outside changed:\n%s\n→\n%s", victimBefore, after)
				}
			})
		}
	}
}

// tree describes every entry under root (not following links) with its inode and bytes.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		id, _ := lstatPath(p)
		fmt.Fprintf(&b, "%s %v %d", p, st.Mode(), id.ino)
		if st.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// TestLeftoverKilledInCreate: a kill between a file's creation and the journal record of
// its inode leaves an empty file (and the folders on its way) that only the intent line
// names. The next run resumes or starts over past it; the same name holding bytes, a second
// link or a link is still foreign, and nothing is touched (TestKillResume met this window).
func TestLeftoverKilledInCreate(t *testing.T) {
	kill := func(t *testing.T, dst string, plant func(t *testing.T, partial string)) {
		d, err := CreateDir(bg, dst, DirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "a.safetensors", "aaaa")
		// What partial.create does up to the kill: the intent, then the file, no record.
		if err := d.p.j.write(record{Intent: "sub/b.safetensors"}); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d.Path, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		plant(t, filepath.Join(d.Path, "sub", "b.safetensors"))
		d.p.fo.close()
		d.p.j.close()
		untrack(d.key)
	}
	empty := func(t *testing.T, p string) {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, resume := range []bool{false, true} {
		t.Run(fmt.Sprintf("empty/resume=%v", resume), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			kill(t, dst, empty)
			d, err := CreateDir(bg, dst, DirOptions{Resume: resume})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Abort()
			want := ".ckpt-journal"
			if resume {
				want = ".ckpt-journal a.safetensors sub"
				if len(d.Resumed) != 1 {
					t.Errorf("resumed %v", d.Resumed)
				}
			}
			if got := strings.Join(entries(t, d.Path), " "); got != want {
				t.Fatalf("left %q, want %q", got, want)
			}
			writeFile(t, d, "sub/b.safetensors", "bb")
		})
	}
	base := t.TempDir()
	victim := filepath.Join(base, "victim.txt")
	os.WriteFile(victim, nil, 0o644)
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, p string)
	}{
		{"bytes", func(t *testing.T, p string) { os.WriteFile(p, []byte("x"), 0o644) }},
		{"hard link", func(t *testing.T, p string) { os.Link(victim, p) }},
		{"link", func(t *testing.T, p string) { os.Symlink(victim, p) }},
		{"folder", func(t *testing.T, p string) { os.Mkdir(p, 0o755) }},
	} {
		for _, resume := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/resume=%v", c.name, resume), func(t *testing.T) {
				dst := filepath.Join(t.TempDir(), "out")
				kill(t, dst, c.plant)
				before := tree(t, filepath.Dir(dst))
				victimBefore := tree(t, base)
				_, err := CreateDir(bg, dst, DirOptions{Resume: resume})
				if !errors.Is(err, ErrForeign) {
					t.Fatalf("CreateDir: %v, want ErrForeign", err)
				}
				if after := tree(t, filepath.Dir(dst)); after != before {
					t.Errorf("the partial folder changed:\n%s\n→\n%s", before, after)
				}
				if after := tree(t, base); after != victimBefore {
					t.Errorf("outside changed:\n%s\n→\n%s", victimBefore, after)
				}
			})
		}
	}
}

// TestStaleIntent: only the last intent not followed by its file's record can be a kill's
// window. An earlier intent — a creation that failed, maybe because something was planted
// at the name — proves nothing: an empty file there is foreign and stays. A file made anew
// (an index written again, its first inode journaled and removed) that a kill left empty
// is ckpt's.
func TestStaleIntent(t *testing.T) {
	for _, resume := range []bool{false, true} {
		t.Run(fmt.Sprintf("failed/resume=%v", resume), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			d, err := CreateDir(bg, dst, DirOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A creation that failed after its intent; another file written after it.
			if err := d.p.j.write(record{Intent: "x.safetensors"}); err != nil {
				t.Fatal(err)
			}
			writeFile(t, d, "a.safetensors", "aaaa")
			if err := os.WriteFile(filepath.Join(d.Path, "x.safetensors"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			d.p.fo.close()
			d.p.j.close()
			untrack(d.key)
			before := tree(t, filepath.Dir(dst))
			if _, err := CreateDir(bg, dst, DirOptions{Resume: resume}); !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "x.safetensors") {
				t.Fatalf("CreateDir: %v, want ErrForeign naming x.safetensors", err)
			}
			if after := tree(t, filepath.Dir(dst)); after != before {
				t.Errorf("the partial folder changed:\n%s\n→\n%s", before, after)
			}
		})
		t.Run(fmt.Sprintf("made-anew/resume=%v", resume), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			d, err := CreateDir(bg, dst, DirOptions{})
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, d, "a.safetensors", "aaaa")
			writeFile(t, d, "index.json", "{}")
			// What partial.create does for a file made before, up to a kill: the old one
			// removed, the intent, the new empty file, no record. (The old file is held
			// open so that the new one cannot get its inode number back.)
			old, err := os.Open(filepath.Join(d.Path, "index.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := os.Remove(filepath.Join(d.Path, "index.json")); err != nil {
				t.Fatal(err)
			}
			if err := d.p.j.write(record{Intent: "index.json"}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d.Path, "index.json"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			d.p.fo.close()
			d.p.j.close()
			untrack(d.key)
			d, err = CreateDir(bg, dst, DirOptions{Resume: resume})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Abort()
			want := ".ckpt-journal"
			if resume {
				want = ".ckpt-journal a.safetensors"
			}
			if got := strings.Join(entries(t, d.Path), " "); got != want {
				t.Fatalf("left %q, want %q", got, want)
			}
		})
	}
}

// TestSecondWriterBusy: while one writer holds a destination, a second is refused as busy
// — on every system: off unix the lock is no longer a silent no-op (issue 28, item 13).
func TestSecondWriterBusy(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out")
	d, err := CreateDir(bg, dst, DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateDir(bg, dst, DirOptions{}); !errors.Is(err, ErrBusy) {
		t.Errorf("a second writer: %v", err)
	}
	d.Abort()
	d, err = CreateDir(bg, dst, DirOptions{})
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	d.Abort()
}
