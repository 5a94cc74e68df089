package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	_ "github.com/ckpt-dev/ckpt/storage/local"
)

func finished(name string, b []byte) storage.Finished {
	return storage.Finished{File: name, Size: int64(len(b)), XXHash64: fmt.Sprintf("%016x", xxhash.Sum64(b))}
}

func writeFile(t *testing.T, out storage.Output, name string, b []byte) {
	t.Helper()
	w, err := out.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFolder: a local folder output appears only at Commit, records each file's size and
// xxhash64 (storage.FileSums) and takes file ranges; an existing folder is replaced only
// with Force and when Proof proves every file in it.
func TestFolder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dst := filepath.Join(dir, "out")
	out, err := storage.CreateOutput(ctx, dst, storage.OutputOptions{Folder: true})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, out, "a.bin", []byte("aaaa"))
	src := filepath.Join(dir, "src")
	data := bytes.Repeat([]byte{7, 1}, 3000)
	os.WriteFile(src, data, 0o600)
	w, err := out.Create("sub/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := storage.As[statedict.RangeWriter](w); !ok {
		t.Fatal("a local file writer takes no ranges")
	}
	if _, err := statedict.WriteRange(w, statedict.Range{Data: data[2:], Path: src, Off: 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the folder appeared before Commit")
	}
	staged, err := out.(storage.Staged).Staged()
	if err != nil || !strings.HasSuffix(staged, ".out.partial") {
		t.Errorf("staged at %q: %v", staged, err)
	}
	sums, err := out.(storage.FileSums).Sums()
	if err != nil {
		t.Fatal(err)
	}
	if sums["a.bin"] != finished("a.bin", []byte("aaaa")) || sums["sub/b.bin"] != finished("sub/b.bin", data[2:]) {
		t.Errorf("sums %v", sums)
	}
	if _, err := out.Create("../x"); err == nil || !strings.Contains(err.Error(), "is not a file name inside the output folder") {
		t.Errorf("a name outside the folder: %v", err)
	}
	if err := out.Commit([]storage.NamedBytes{{Name: "manifest", Data: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"a.bin": []byte("aaaa"), "sub/b.bin": data[2:], "manifest": []byte("m")} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v", name, err)
		}
	}

	if _, err := storage.CreateOutput(ctx, dst, storage.OutputOptions{Folder: true}); err == nil {
		t.Error("wrote over an existing folder without Force")
	}
	os.RemoveAll(filepath.Join(dst, "sub"))
	partial := func(ctx context.Context, _ string) ([]storage.Finished, bool) {
		return []storage.Finished{{File: "manifest", Size: -1}}, true
	}
	if _, err := storage.CreateOutput(ctx, dst, storage.OutputOptions{Folder: true, Force: true, Proof: partial}); err == nil {
		t.Errorf("replaced a folder whose files are not all proven: %v", err)
	}
	proof := func(ctx context.Context, _ string) ([]storage.Finished, bool) {
		return []storage.Finished{{File: "manifest", Size: -1}, finished("a.bin", []byte("aaaa"))}, true
	}
	out, err = storage.CreateOutput(ctx, dst, storage.OutputOptions{Folder: true, Force: true, Proof: proof})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, out, "c", nil)
	if err := out.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 1 || entries[0].Name() != "c" {
		t.Errorf("replaced folder holds %v", entries)
	}
}

// TestFile: a file output's companions are written beside it and committed after it;
// Sums records the file by base name; it holds nothing else; Abort leaves nothing.
func TestFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.pt")
	opts := storage.OutputOptions{Companions: []string{".manifest"}}
	out, err := storage.CreateOutput(ctx, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, out, "", []byte("weights"))
	if _, err := out.Create("other"); err == nil || !strings.Contains(err.Error(), "a single-file output cannot hold other") {
		t.Errorf("a single-file output took another file: %v", err)
	}
	if sums, _ := out.(storage.FileSums).Sums(); sums["out.pt"] != finished("out.pt", []byte("weights")) {
		t.Errorf("sums %v", sums)
	}
	if l := out.(storage.Leftovers); l.Resumed() != nil || l.CleanedUp() {
		t.Error("a new file output found leftovers")
	}
	writeFile(t, out, ".manifest", []byte("m"))
	if err := out.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "weights" {
		t.Errorf("file holds %q", b)
	}
	if b, _ := os.ReadFile(dst + ".manifest"); string(b) != "m" {
		t.Errorf("manifest holds %q", b)
	}

	out, err = storage.CreateOutput(ctx, filepath.Join(dir, "gone.pt"), opts)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, out, "", []byte("x"))
	out.Abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("an aborted output left %v", entries)
	}
}

// TestShared: two hosts' shares of a local folder: each writes its files and seals; the
// finisher reads every part, sees the folder proven (Staged) and commits it.
func TestShared(t *testing.T) {
	ctx := context.Background()
	dst := filepath.Join(t.TempDir(), "out")
	var shares []storage.SharedOutput
	for host := range 2 {
		so, err := storage.JoinOutput(ctx, dst, storage.SharedOptions{OutputOptions: storage.OutputOptions{Folder: true}, Host: host, Hosts: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer so.Abort()
		shares = append(shares, so)
		writeFile(t, so, fmt.Sprintf("f%d", host), []byte{byte(host)})
		if err := so.Seal([]byte(fmt.Sprint(host))); err != nil {
			t.Fatal(err)
		}
	}
	parts, err := shares[0].Parts()
	if err != nil || len(parts) != 2 || string(parts[1]) != "1" {
		t.Fatalf("parts %q: %v", parts, err)
	}
	if _, err := shares[0].(storage.Staged).Staged(); err != nil {
		t.Fatal(err)
	}
	sums, err := shares[0].(storage.FileSums).Sums()
	if err != nil || len(sums) != 2 {
		t.Errorf("the finisher's sums %v: %v", sums, err)
	}
	shares[1].Abort() // a sealed share stays
	if err := shares[0].Commit(nil); err != nil {
		t.Fatal(err)
	}
	for host := range 2 {
		if b, err := os.ReadFile(filepath.Join(dst, fmt.Sprintf("f%d", host))); err != nil || !bytes.Equal(b, []byte{byte(host)}) {
			t.Errorf("host %d's file: %v", host, err)
		}
	}
}
