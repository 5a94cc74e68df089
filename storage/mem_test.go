package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// TestMemReadsCheckpoints: a DCP folder copied into the in-memory backend reads as it
// does from local disk — the same tensors with the same bytes — so readers need nothing
// but the backend interface.
func TestMemReadsCheckpoints(t *testing.T) {
	m := storage.NewMem()
	storage.Register("memtest", m)
	ctx := context.Background()
	const dir = "../testdata/dcp/model"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m.Put("memtest://run/step-1/"+e.Name(), b)
	}
	local, err := formats.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	remote, err := formats.Open(ctx, "memtest://run/step-1")
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	want, got := tensorBytes(t, local), tensorBytes(t, remote)
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("%d tensors in memory, %d on disk", len(got), len(want))
	}
	for name, b := range want {
		if string(got[name]) != string(b) {
			t.Errorf("%s: bytes differ", name)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := formats.Open(cancelled, "memtest://run/step-1"); !errors.Is(err, context.Canceled) {
		t.Errorf("opened with a cancelled context: %v", err)
	}
}

func tensorBytes(t *testing.T, ck *statedict.Checkpoint) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := statedict.Walk(ck.Root, "", func(name string, v statedict.Value) error {
		if tn, ok := v.(*statedict.Tensor); ok {
			b, err := io.ReadAll(io.NewSectionReader(tn.Storage, 0, tn.Storage.Size))
			out[name] = b
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMemOutput: an output's files appear once closed, the committed ones last; Abort
// removes what the output wrote and nothing else; an earlier output is replaced only with
// Force and only when its manifest claims every object there.
func TestMemOutput(t *testing.T) {
	m := storage.NewMem()
	ctx := context.Background()
	m.Put("mem://b/other/keep.txt", []byte("user's"))
	o, err := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := o.Create("model.safetensors")
	w.Write([]byte("weights"))
	if _, ok := m.Get("mem://b/out/model.safetensors"); ok {
		t.Fatal("a file visible before it is closed")
	}
	w.Close()
	o.Abort()
	if got := m.Names(); !slices.Equal(got, []string{"mem://b/other/keep.txt"}) {
		t.Fatalf("after Abort: %v", got)
	}
	o, _ = m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	w, _ = o.Create("model.safetensors")
	w.Write([]byte("weights"))
	w.Close()
	if err := o.Commit([]storage.NamedBytes{{Name: "ckpt-manifest.json", Data: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true}); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("over an earlier output without Force: %v", err)
	}
	m.Put("mem://b/out/planted.txt", []byte("not ckpt's"))
	owned := func(context.Context, string) ([]string, bool) {
		return []string{"model.safetensors", "ckpt-manifest.json"}, true
	}
	if _, err := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true, Force: true, Owned: owned}); !errors.Is(err, storage.ErrForeign) {
		t.Fatalf("Force over a folder holding a file no manifest claims: %v", err)
	}
	if _, ok := m.Get("mem://b/out/model.safetensors"); !ok {
		t.Fatal("a refused Force removed the earlier output")
	}
}

// TestMemReadTensors: ReadTensors, the full read inspect, check and verify make, reads a
// checkpoint mapped from the in-memory backend as from disk. Its mapped storages are
// FileBacked like a local file's, and the pread fast path used to open their mem:// path
// as a local file ("open memtest2://…: no such file or directory").
func TestMemReadTensors(t *testing.T) {
	m := storage.NewMem()
	storage.Register("memtest2", m)
	ctx := context.Background()
	for _, file := range []string{"../testdata/safetensors/every_dtype.safetensors", "../testdata/torch/training_cuda.pt"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		url := "memtest2://b/" + filepath.Base(file)
		m.Put(url, b)
		want, got := readTensors(t, ctx, file), readTensors(t, ctx, url)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: %d tensors read from memory differ from the %d on disk", url, len(got), len(want))
		}
	}
}

// readTensors is each tensor's bytes as ReadTensors streams them.
func readTensors(t *testing.T, ctx context.Context, path string) []string {
	t.Helper()
	ck, err := formats.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tensors, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]bytes.Buffer, len(tensors))
	if err := statedict.ReadTensors(ctx, tensors, func(i int) io.Writer { return &bufs[i] }, statedict.ReadOptions{}); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := make([]string, len(bufs))
	for i := range bufs {
		out[i] = bufs[i].String()
	}
	return out
}
