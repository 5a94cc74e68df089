package formats

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// dtensorExpected is testdata/dtensor/LAYOUT.json: what torch's DTensor.full_tensor()
// gives for every tensor of the ranks' saves (gen.py).
type dtensorExpected struct {
	World   int `json:"world"`
	Tensors map[string]struct {
		Shape      []int64  `json:"shape"`
		DType      string   `json:"dtype"`
		SHA256     string   `json:"sha256"`
		Placements []string `json:"placements"`
	} `json:"tensors"`
}

func readDTensorExpected(t *testing.T, layout string) dtensorExpected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "dtensor", layout+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var e dtensorExpected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkDTensorListing asserts that ck holds exactly the tensors torch lists, each
// bit-identical to DTensor.full_tensor().
func checkDTensorListing(t *testing.T, ck *statedict.Checkpoint, e dtensorExpected) {
	t.Helper()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(e.Tensors) {
		t.Errorf("%d tensors, torch lists %d", len(ts), len(e.Tensors))
	}
	for _, nt := range ts {
		want, ok := e.Tensors[nt.Name]
		if !ok {
			t.Errorf("%s: not in torch's listing", nt.Name)
			continue
		}
		if !slices.Equal(nt.Tensor.Shape, want.Shape) || nt.Tensor.DType.String() != want.DType {
			t.Errorf("%s: %s %v, torch %s %v", nt.Name, nt.Tensor.DType, nt.Tensor.Shape, want.DType, want.Shape)
			continue
		}
		b, err := nt.Tensor.Bytes()
		if err != nil {
			t.Errorf("%s: %v", nt.Name, err)
			continue
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want.SHA256 {
			t.Errorf("%s: sha256 %s, torch's full_tensor() %s", nt.Name, got, want.SHA256)
		}
	}
}

// TestDTensorRanks reads real FSDP2 per-rank saves (uneven and empty shards, HSDP's
// (Replicate, Shard) on a 2-D mesh, FSDP2 over tensor parallelism with _StridedShard, evenly and not, the
// mesh as torch 2.5 pickles it) as the folder and as each rank file alone: every tensor, weights and AdamW moments, is
// what torch's full_tensor() gives, bit for bit.
func TestDTensorRanks(t *testing.T) {
	ctx := context.Background()
	// *_torch25: the files as torch 2.5 pickles the mesh (gen_torch25.py).
	for _, tc := range []struct{ layout, expected string }{{"fsdp2", "fsdp2"}, {"hsdp", "hsdp"}, {"fsdp_tp", "fsdp_tp"}, {"fsdp_tp_uneven", "fsdp_tp_uneven"}, {"fsdp2_torch25", "fsdp2"}, {"fsdp_tp_uneven_torch25", "fsdp_tp_uneven"}} {
		t.Run(tc.layout, func(t *testing.T) {
			e := readDTensorExpected(t, tc.expected)
			dir := filepath.Join("..", "testdata", "dtensor", tc.layout)
			paths := []string{dir}
			files, _ := filepath.Glob(filepath.Join(dir, "*.pt"))
			if len(files) != e.World {
				t.Fatalf("%d rank files, world %d", len(files), e.World)
			}
			paths = append(paths, files...)
			for _, p := range paths {
				ck, err := Open(ctx, p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if ck.Format != DTensorRanks {
					t.Errorf("%s: format %q", p, ck.Format)
				}
				checkDTensorListing(t, ck, e)
				if epoch, _ := ck.Root.(*statedict.Dict).Get("epoch"); epoch != int64(3) {
					t.Errorf("%s: epoch %v, want 3 (kept once)", p, epoch)
				}
				ck.Close()
			}
		})
	}
}

// patchedRank copies the rank file src into dir under name with its pickle's bytes old
// replaced by new (which must occur exactly once; with old nil, the whole pickle replaced
// by new when new is not nil), rewriting the zip archive around it.
func patchedRank(t *testing.T, src, dir, name string, old, new []byte) {
	t.Helper()
	zr, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	found := false
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.Name, "/data.pkl") && old != nil {
			if n := bytes.Count(b, old); n != 1 {
				t.Fatalf("%s: %q occurs %d times in the pickle", src, old, n)
			}
			b, found = bytes.Replace(b, old, new, 1), true
		}
		if strings.HasSuffix(f.Name, "/data.pkl") && old == nil && new != nil {
			b, found = new, true
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if (old != nil || new != nil) && !found {
		t.Fatalf("%s has no data.pkl", src)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDTensorRanksHostile: rank sets and rank files that do not make one checkpoint are
// refused as corrupt (or unsupported), naming the file, the tensor and where it lies;
// a mesh claiming 2^40 ranks allocates nothing for them.
func TestDTensorRanksHostile(t *testing.T) {
	ctx := context.Background()
	fix := func(layout, name string) string { return filepath.Join("..", "testdata", "dtensor", layout, name) }
	copyTo := func(t *testing.T, dir string, srcs map[string]string) {
		for name, src := range srcs {
			patchedRank(t, src, dir, name, nil, nil)
		}
	}
	// The pickle bytes patched: rank 0's local shard of model.0.weight is (3, 8) (BININT1 3,
	// BININT1 8, TUPLE2); its mesh's one axis is (2,) (the _FlatLayout shape).
	local38 := []byte("K\x03K\x08\x86q\x1c")
	cases := []struct {
		name string
		make func(t *testing.T, dir string)
		open string // the file opened ("" the folder)
		want []string
		kind error
	}{
		{"missing rank", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"a.pt": fix("hsdp", "part-0.pt"), "b.pt": fix("hsdp", "part-2.pt")})
		}, "", []string{"meshes span 4 ranks", "the files of rank 0, 2 are missing"}, ckpterr.ErrCorrupt},
		{"one rank alone", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
		}, "rank1.pt", []string{"rank1.pt holds one rank's DTensor shards", "the files of rank 0 are missing"}, ckpterr.ErrCorrupt},
		{"rank planted twice", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank0.pt": fix("fsdp2", "rank0.pt"), "rank1.pt": fix("fsdp2", "rank1.pt"), "rank0-copy.pt": fix("fsdp2", "rank0.pt")})
		}, "", []string{"rank0-copy.pt and", "rank0.pt both hold rank 0's shards"}, ckpterr.ErrCorrupt},
		{"ranks of two jobs", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank0.pt": fix("fsdp2", "rank0.pt"), "rank1.pt": fix("fsdp_tp", "rank1.pt")})
		}, "", []string{"meshes span 4 ranks", "the files of rank 2, 3 are missing"}, ckpterr.ErrCorrupt},
		{"meshes disagree", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"part-0.pt": fix("hsdp", "part-0.pt"), "part-2.pt": fix("hsdp", "part-2.pt"), "part-3.pt": fix("hsdp", "part-3.pt")})
			patchedRank(t, fix("hsdp", "part-1.pt"), dir, "part-1.pt", []byte("replicate"), []byte("replicatX"))
		}, "", []string{"model.0.weight: ", "part-1.pt (byte ", "part-0.pt (byte ", "on the mesh (replicate=2, shard=2)", "on the mesh (replicatX=2, shard=2)"}, ckpterr.ErrCorrupt},
		{"a file without DTensors", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank0.pt": fix("fsdp2", "rank0.pt"), "rank1.pt": fix("fsdp2", "rank1.pt"),
				"full.pt": filepath.Join("..", "testdata", "torch", "views.pt")})
		}, "", []string{"full.pt: ", "holds no DTensor"}, ckpterr.ErrCorrupt},
		{"local shard disagrees with placement", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
			patchedRank(t, fix("fsdp2", "rank0.pt"), dir, "rank0.pt", local38, []byte("K\x02K\x08\x86q\x1c"))
		}, "", []string{"model.0.weight", "rank0.pt (byte ", "local shard of shape [2 8]", "the shard [3 8] at [0 0]"}, ckpterr.ErrCorrupt},
		{"ranks disagree on a value", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank0.pt": fix("fsdp2", "rank0.pt")})
			patchedRank(t, fix("fsdp2", "rank1.pt"), dir, "rank1.pt", []byte("K\x03u."), []byte("K\x04u."))
		}, "", []string{"epoch: rank 0's", "holds 3, rank 1's", "rank1.pt 4"}, ckpterr.ErrCorrupt},
		{"partial placement", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
			patchedRank(t, fix("fsdp2", "rank0.pt"), dir, "rank0.pt", []byte("placement_types\nShard\n"), []byte("placement_types\nPartial\n"))
		}, "", []string{"rank0.pt (byte ", "model.0.weight", "Partial(sum)", "not the tensor's data"}, ckpterr.ErrUnsupported},
		{"another wrapper subclass", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
			patchedRank(t, fix("fsdp2", "rank0.pt"), dir, "rank0.pt", []byte("torch.distributed.tensor\nDTensor\n"), []byte("torch.distributed.tensor\nXTensor\n"))
		}, "", []string{"rank0.pt", "[0.weight]", "tensor subclass torch.distributed.tensor.XTensor"}, ckpterr.ErrUnsupported},
		{"saved by a rank outside the mesh", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
			patchedRank(t, fix("fsdp2", "rank0.pt"), dir, "rank0.pt", []byte("_coordinate_on_dimqKK\x00\x85"), []byte("_coordinate_on_dimqKN"))
		}, "", []string{"rank0.pt", "[0.weight]", "coordinate is None", "a rank outside the mesh"}, ckpterr.ErrCorrupt},
		{"mesh of 2^40 ranks", func(t *testing.T, dir string) {
			copyTo(t, dir, map[string]string{"rank1.pt": fix("fsdp2", "rank1.pt")})
			patchedRank(t, fix("fsdp2", "rank0.pt"), dir, "rank0.pt", []byte("shapeq2K\x02\x85"), []byte("shapeq2\x8a\x06\x00\x00\x00\x00\x00\x01\x85"))
		}, "", []string{"rank0.pt", "[0.weight]", "a mesh axis of 1099511627776 ranks"}, ckpterr.ErrUnsupported},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, dir)
			p := filepath.Join(dir, tc.open)
			ck, err := Open(ctx, p)
			if err == nil {
				ck.Close()
				t.Fatalf("%s opened", p)
			}
			t.Log(err)
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// FuzzDTensorRanks opens a 2-rank FSDP2 folder whose rank 0 pickle is arbitrary: it must
// open or fail, never panic, and every tensor it reassembles must read whole.
func FuzzDTensorRanks(f *testing.F) {
	src := filepath.Join("..", "testdata", "dtensor", "fsdp2")
	zr, err := zip.OpenReader(filepath.Join(src, "rank0.pt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, zf := range zr.File {
		if strings.HasSuffix(zf.Name, "/data.pkl") {
			r, _ := zf.Open()
			b, _ := io.ReadAll(r)
			f.Add(b)
		}
	}
	zr.Close()
	f.Fuzz(func(t *testing.T, pkl []byte) {
		dir := t.TempDir()
		patchedRank(t, filepath.Join(src, "rank0.pt"), dir, "rank0.pt", nil, pkl)
		patchedRank(t, filepath.Join(src, "rank1.pt"), dir, "rank1.pt", nil, nil)
		ck, err := Open(context.Background(), dir)
		if err != nil {
			return
		}
		defer ck.Close()
		ts, err := ck.Tensors()
		if err != nil {
			return
		}
		for _, nt := range ts {
			var buf bytes.Buffer
			if _, err := nt.Tensor.WriteTo(&buf); err != nil {
				continue
			}
			if int64(buf.Len()) != nt.Tensor.NBytes() {
				t.Fatalf("%s: wrote %d bytes, NBytes %d", nt.Name, buf.Len(), nt.Tensor.NBytes())
			}
		}
	})
}

// TestShardedTensorRefused: what an FSDP1 rank saves with torch.save under
// SHARDED_STATE_DICT (testdata/dtensor/gen_sharded.py: a ShardedTensor, which torch.load
// with weights_only=True refuses too) is refused as unsupported — not corrupt — naming the
// subclass and the way out (DCP), as a file and as a folder of rank files.
func TestShardedTensorRefused(t *testing.T) {
	for _, p := range []string{"../testdata/dtensor/fsdp1_sharded/rank0.pt", "../testdata/dtensor/fsdp1_sharded"} {
		_, err := Open(context.Background(), p)
		if !errors.Is(err, ckpterr.ErrUnsupported) || errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(fmt.Sprint(err), "ShardedTensor") || !strings.Contains(fmt.Sprint(err), "torch.distributed.checkpoint") {
			t.Errorf("%s: %v, want unsupported (not corrupt) naming ShardedTensor and DCP", p, err)
		}
	}
}
