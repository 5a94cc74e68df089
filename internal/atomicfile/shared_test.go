package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestShared: three members write one folder; it appears under its final name only when
// member 0 commits after every share is sealed, holding their files and no control file.
func TestShared(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "out")
	var ds []*Dir
	for h := range 3 {
		d, err := JoinDir(bg, dst, DirOptions{}, h, 3)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if _, err := JoinDir(bg, dst, DirOptions{}, 1, 3); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second host 1: %v", err)
	}
	if _, err := CreateDir(bg, dst, DirOptions{}); err == nil {
		t.Fatal("a single-process output into a shared partial folder")
	}
	for h, d := range ds {
		writeFile(t, d, "__"+string(rune('0'+h))+"_0.distcp", strings.Repeat("x", h+1))
	}
	if err := ds[0].Seal(bg, []byte("part 0")); err != nil {
		t.Fatal(err)
	}
	if err := ds[0].Commit(bg); err == nil || !strings.Contains(err.Error(), "host 1 is still writing") {
		t.Fatalf("commit while host 1 writes: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("the destination appeared before every host finished")
	}
	// The failed commit left everything for another attempt.
	if got := entries(t, ds[0].Path); len(got) < 3 {
		t.Fatalf("a failed commit removed files: %v", got)
	}
	d0, err := JoinDir(bg, dst, DirOptions{}, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if part, ok := d0.Sealed(); !ok || string(part) != "part 0" {
		t.Fatalf("host 0 rejoining: sealed %q %v", part, ok)
	}
	for h, d := range ds[1:] {
		if err := d.Seal(bg, []byte("part "+string(rune('1'+h)))); err != nil {
			t.Fatal(err)
		}
		d.Abort() // leaves, keeping its sealed share
	}
	parts, err := d0.Parts(bg)
	if err != nil || len(parts) != 3 || string(parts[2]) != "part 2" {
		t.Fatalf("parts %q, %v", parts, err)
	}
	if err := ds[1].Commit(bg); err == nil {
		t.Fatal("host 1 committed")
	}
	// Unsealed (another conversion's share), a member's files go and it writes anew.
	d2, err := JoinDir(bg, dst, DirOptions{}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Unseal(bg); err != nil {
		t.Fatal(err)
	}
	if _, ok := d2.Sealed(); ok || slices.Contains(entries(t, d2.Path), "__2_0.distcp") {
		t.Fatalf("unsealed: %v", entries(t, d2.Path))
	}
	writeFile(t, d2, "__2_0.distcp", "yyy")
	d2.Seal(bg, []byte("part 2"))
	d2.Abort()
	writeFile(t, d0, ".metadata", "md")
	os.WriteFile(filepath.Join(d0.Path, "stray"), nil, 0o644)
	if err := d0.Commit(bg); !errors.Is(err, ErrForeign) {
		t.Fatalf("commit with a stray file: %v", err)
	}
	os.Remove(filepath.Join(d0.Path, "stray"))
	d0, err = JoinDir(bg, dst, DirOptions{}, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d0, ".metadata", "md")
	if err := d0.Commit(bg); err != nil {
		t.Fatal(err)
	}
	got := entries(t, dst)
	if want := []string{".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"}; !slices.Equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"out"}) {
		t.Fatalf("left beside it: %v", got)
	}
}

// TestSharedLeftovers: a member killed while writing (its lock released, its journal
// left) finds its own leftovers on its next run — resumed or removed — and never touches
// another member's files; a member that aborts removes only what it wrote.
func TestSharedLeftovers(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out")
	other, err := JoinDir(bg, dst, DirOptions{}, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, other, "zero", "0")
	kill := func() {
		d, err := JoinDir(bg, dst, DirOptions{}, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "done", "12")
		f, err := d.Create("half")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("1")
		f.Close()
		d.member.release(d) // the kernel drops a killed process's lock
		untrack(d.key)
	}
	kill()
	d, err := JoinDir(bg, dst, DirOptions{Resume: true}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Resumed["done"]; !ok || len(d.Resumed) != 1 || !d.CleanedUp {
		t.Fatalf("resumed %v, cleaned %v", d.Resumed, d.CleanedUp)
	}
	if got := entries(t, d.Path); slices.Contains(got, "half") || !slices.Contains(got, "done") {
		t.Fatalf("after resuming: %v", got)
	}
	d.member.release(d)
	untrack(d.key)
	kill()
	d, err = JoinDir(bg, dst, DirOptions{}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := entries(t, d.Path); slices.Contains(got, "done") || slices.Contains(got, "half") || !slices.Contains(got, "zero") || !d.CleanedUp {
		t.Fatalf("after starting over: %v", got)
	}
	writeFile(t, d, "mine", "m")
	d.Abort()
	if got := entries(t, other.Path); slices.Contains(got, "mine") || !slices.Contains(got, "zero") {
		t.Fatalf("after host 1 aborted: %v", got)
	}
	other.Abort()
	if _, err := os.Stat(other.Path); !os.IsNotExist(err) {
		t.Fatalf("the partial folder stays once every member left: %v", entries(t, other.Path))
	}
}

// TestSealedHostExiting: a host that sealed its share but still holds its lock — its
// process between the seal and its exit, a window a loaded machine widens — does not make
// the finisher's commit fail: the finisher waits for the lock.
func TestSealedHostExiting(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out")
	var ds []*Dir
	for h := range 2 {
		d, err := JoinDir(bg, dst, DirOptions{}, h, 2)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "__"+string(rune('0'+h))+"_0.distcp", "x")
		if err := d.Seal(bg, []byte("part")); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		ds[1].Abort() // sealed: lets go of the lock, keeps the share
		close(released)
	}()
	if err := ds[0].Commit(bg); err != nil {
		t.Fatalf("commit while a sealed host exits: %v", err)
	}
	<-released
	if _, err := os.Stat(filepath.Join(dst, "__1_0.distcp")); err != nil {
		t.Fatal(err)
	}
}
