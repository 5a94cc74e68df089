package formats

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/statedict"
)

type dirOutput string

func (d dirOutput) Create(name string) (io.WriteCloser, error) {
	return os.Create(filepath.Join(string(d), filepath.FromSlash(name)))
}
func (d dirOutput) Name() string { return string(d) }

func bf16(base int, shape ...int64) *statedict.Tensor {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(base)+uint16(i))
	}
	return &statedict.Tensor{DType: statedict.BFloat16, Shape: shape, Strides: statedict.ContiguousStrides(shape),
		Storage: statedict.NewMappedStorage(fmt.Sprint(base), "tpu", statedict.BFloat16, b)}
}

// TestSafetensorsRanks writes a per-device safetensors folder over 4 ranks — a matrix by
// rows (uneven, one empty piece), one by columns replicated in pairs, a replicated vector —
// and checks each rank file holds its pieces, the manifest, the folder read back whole, and
// that writing in parts gives the same files.
func TestSafetensorsRanks(t *testing.T) {
	rows, cols, rep, tiny := bf16(0, 5, 3), bf16(1000, 2, 8), bf16(2000, 6), bf16(3000, 1, 3)
	root := statedict.NewDict("")
	root.Set("rows", rows)
	root.Set("tiny", tiny)
	root.Set("cols", cols)
	root.Set("rep", rep)
	root.Set("epoch", int64(3))
	ck := &statedict.Checkpoint{Root: root}
	piece := func(off, size []int64, ranks ...int) statedict.Piece {
		return statedict.Piece{Offsets: off, Sizes: size, Ranks: ranks}
	}
	sh := &statedict.Sharding{Ranks: 4, Mesh: []statedict.MeshAxis{{Name: "dp", Size: 2}, {Name: "tp", Size: 2}}, Tensors: map[*statedict.Tensor]*statedict.TensorSharding{
		// DTensor: dp splits the 5 rows 3 + 2, tp each of those 2 + 1 and 1 + 1.
		rows: {Placements: []string{"Shard(dim=0)", "Shard(dim=0)"}, Pieces: []statedict.Piece{piece([]int64{0, 0}, []int64{2, 3}, 0), piece([]int64{2, 0}, []int64{1, 3}, 1),
			piece([]int64{3, 0}, []int64{1, 3}, 2), piece([]int64{4, 0}, []int64{1, 3}, 3)}},
		// One row over four ranks: rank 0 holds it, the others an empty piece at offset 1.
		tiny: {Placements: []string{"Shard(dim=0)", "Shard(dim=0)"}, Pieces: []statedict.Piece{piece([]int64{0, 0}, []int64{1, 3}, 0),
			piece([]int64{1, 0}, []int64{0, 3}, 1, 2, 3)}},
		cols: {Placements: []string{"Replicate()", "Shard(dim=1)"}, Pieces: []statedict.Piece{piece([]int64{0, 0}, []int64{2, 4}, 0, 2), piece([]int64{0, 4}, []int64{2, 4}, 1, 3)}},
	}}
	dir := t.TempDir()
	w, err := safetensors.WriteRanks(dirOutput(dir), ck, statedict.WriteOptions{Sharding: sh})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Files) != 5 || w.Files[4] != safetensors.ShardingFile || len(w.NotWritten) != 1 {
		t.Fatalf("files %v, not written %v", w.Files, w.NotWritten)
	}
	// Rank 2 holds rows[3:4], cols[:, :4] and rep.
	r2, err := Open(context.Background(), filepath.Join(dir, "rank-00002-of-00004.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]*statedict.Tensor{"rows": mustBox(t, rows, 3, 0, 1, 3), "cols": mustBox(t, cols, 0, 0, 2, 4), "rep": rep} {
		got, err := r2.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := got.Bytes()
		b, _ := want.Bytes()
		if !bytes.Equal(a, b) {
			t.Errorf("rank 2's %s: %x, want %x", name, a, b)
		}
	}
	r2.Close()
	// The folder reads back as the whole tensors.
	back, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		name string
		t    *statedict.Tensor
	}{{"rows", rows}, {"cols", cols}, {"rep", rep}} {
		got, err := back.Tensor(x.name)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := got.Bytes()
		b, _ := x.t.Bytes()
		if !bytes.Equal(a, b) {
			t.Errorf("%s read back %x, want %x", x.name, a, b)
		}
	}
	back.Close()
	man, _ := os.ReadFile(filepath.Join(dir, safetensors.ShardingFile))
	for _, want := range []string{`"world_size": 4`, `"placements":["Replicate()","Shard(dim=1)"]`, `"dtype":"BF16"`, `"name": "tp"`} {
		if !strings.Contains(string(man), want) {
			t.Errorf("manifest lacks %s:\n%s", want, man)
		}
	}
	// In parts.
	parts := t.TempDir()
	var pp [][]byte
	for _, ranks := range [][]int{{2, 3}, {1}, {0}} {
		w, err := safetensors.WriteRanks(dirOutput(parts), ck, statedict.WriteOptions{Sharding: sh, Ranks: ranks})
		if err != nil {
			t.Fatal(err)
		}
		pp = append(pp, w.Part)
	}
	if _, err := safetensors.FinishRanks(dirOutput(parts), ck, statedict.WriteOptions{Sharding: sh}, pp[:2]); err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("finished without rank 0: %v", err)
	}
	if _, err := safetensors.FinishRanks(dirOutput(parts), ck, statedict.WriteOptions{Sharding: sh}, pp); err != nil {
		t.Fatal(err)
	}
	for _, f := range w.Files {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(parts, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between one write and three parts", f)
		}
	}
	// A rank file that does not hold its piece is refused.
	r0, _ := os.ReadFile(filepath.Join(parts, "rank-00000-of-00004.safetensors"))
	if err := os.WriteFile(filepath.Join(parts, "rank-00001-of-00004.safetensors"), r0, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), parts); err == nil || !strings.Contains(err.Error(), `says it is rank "0/4"`) {
		t.Errorf("swapped rank files: %v", err)
	}
	// Placements that put the pieces elsewhere than the manifest says — the devices would
	// place their shards wrongly, though the pieces still tile the tensor — are refused.
	mpath := filepath.Join(dir, safetensors.ShardingFile)
	m, _ := os.ReadFile(mpath)
	bad := bytes.Replace(m, []byte(`"Replicate()","Shard(dim=1)"`), []byte(`"Shard(dim=1)","Replicate()"`), 1)
	if bytes.Equal(bad, m) {
		t.Fatalf("no cols placements in %s", m)
	}
	os.WriteFile(mpath, bad, 0o644)
	if _, err := Open(context.Background(), dir); !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), `tensor "cols": rank 2 holds the piece at [0 0]`) {
		t.Errorf("placements disagreeing with the pieces: %v", err)
	}
}

func mustBox(t *testing.T, x *statedict.Tensor, o0, o1, s0, s1 int64) *statedict.Tensor {
	b, err := x.Box([]int64{o0, o1}, []int64{s0, s1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzRanksManifest feeds arbitrary sharding.json files, next to valid rank files, to Open:
// it must never panic, fail only as corrupt or unsupported (or over a rank file that is not
// there), and every tensor of a manifest it accepts must read whole.
func FuzzRanksManifest(f *testing.F) {
	seed := f.TempDir()
	rows, rep := bf16(0, 5, 3), bf16(100, 4)
	root := statedict.NewDict("")
	root.Set("rows", rows)
	root.Set("rep", rep)
	sh := &statedict.Sharding{Ranks: 2, Tensors: map[*statedict.Tensor]*statedict.TensorSharding{
		rows: {Pieces: []statedict.Piece{{Offsets: []int64{0, 0}, Sizes: []int64{3, 3}, Ranks: []int{0}}, {Offsets: []int64{3, 0}, Sizes: []int64{2, 3}, Ranks: []int{1}}}}}}
	if _, err := safetensors.WriteRanks(dirOutput(seed), &statedict.Checkpoint{Root: root}, statedict.WriteOptions{Sharding: sh}); err != nil {
		f.Fatal(err)
	}
	man, err := os.ReadFile(filepath.Join(seed, safetensors.ShardingFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(man)
	f.Add([]byte(strings.Replace(string(man), `"sizes": [
      3,`, `"sizes": [
      4,`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		for _, r := range []string{safetensors.RankFile(0, 2), safetensors.RankFile(1, 2)} {
			if err := os.Link(filepath.Join(seed, r), filepath.Join(dir, r)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, safetensors.ShardingFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := Open(context.Background(), dir)
		if err != nil {
			if !errors.Is(err, ckpterr.ErrCorrupt) && !errors.Is(err, ckpterr.ErrUnsupported) && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("error %v is neither corrupt nor unsupported", err)
			}
			return
		}
		defer ck.Close()
		tensors, err := ck.Tensors()
		if err != nil {
			t.Fatal(err)
		}
		for _, nt := range tensors {
			if nt.Tensor.NBytes() > 1<<20 {
				continue
			}
			if _, err := nt.Tensor.Bytes(); err != nil {
				t.Fatalf("%s: accepted but unreadable: %v", nt.Name, err)
			}
		}
	})
}
