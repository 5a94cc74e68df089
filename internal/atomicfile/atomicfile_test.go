package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	f, err := Create(dst, false)
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
	f, _ = Create(dst, false)
	f.WriteString("v1")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // no effect after Commit
	if _, err := Create(dst, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrote without force: %v", err)
	}
	f, _ = Create(dst, true)
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

// TestDir: a folder output replaces an existing one only when complete.
func TestDir(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "hf")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dst, "old"), []byte("x"), 0o644)
	if _, err := CreateDir(dst, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrote without force: %v", err)
	}
	d, err := CreateDir(dst, true)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d.Path, "model.safetensors"), []byte("y"), 0o644)
	if got := entries(t, dst); len(got) != 1 || got[0] != "old" {
		t.Fatalf("destination changed before Commit: %v", got)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dst); len(got) != 1 || got[0] != "model.safetensors" {
		t.Fatalf("after Commit: %v", got)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("leftovers: %v", got)
	}
	d, _ = CreateDir(filepath.Join(dir, "other"), false)
	d.Abort()
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("Abort left %v", got)
	}
}

// TestRemovePending: outputs being written are removed (files and folders), committed
// ones are not, and a Commit after the removal fails instead of producing an output.
func TestRemovePending(t *testing.T) {
	dir := t.TempDir()
	done, err := Create(filepath.Join(dir, "done.pt"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Commit(); err != nil {
		t.Fatal(err)
	}
	f, _ := Create(filepath.Join(dir, "half.pt"), false)
	f.WriteString("half")
	d, _ := CreateDir(filepath.Join(dir, "folder"), false)
	os.WriteFile(filepath.Join(d.Path, "model.safetensors"), []byte("x"), 0o644)
	if n := RemovePending(); n != 2 {
		t.Errorf("RemovePending removed %d outputs, want 2", n)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "done.pt" {
		t.Fatalf("left %v, want only done.pt", got)
	}
	if f.Commit() == nil || d.Commit() == nil {
		t.Fatal("Commit after RemovePending succeeded")
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("left %v after the failed Commits", got)
	}
	if n := RemovePending(); n != 0 {
		t.Errorf("%d outputs still pending", n)
	}
}

// TestMissingParent: an output in a folder that does not exist is refused naming the folder.
func TestMissingParent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := Create(filepath.Join(dir, "out.pt"), false); err == nil || !strings.Contains(err.Error(), "the folder "+dir+" does not exist") {
		t.Errorf("Create: %v", err)
	}
	if _, err := CreateDir(filepath.Join(dir, "out"), false); err == nil || !strings.Contains(err.Error(), "the folder "+dir+" does not exist") {
		t.Errorf("CreateDir: %v", err)
	}
}
