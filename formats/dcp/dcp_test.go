package dcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

const fixtures = "../../testdata/dcp"

// listing is what testdata/dcp/gen.py records from torch for each fixture.
type listing struct {
	Dir     string            `json:"dir"`
	Format  string            `json:"format"`
	Chunked map[string]int    `json:"chunked"`
	Tensors []listedTensor    `json:"tensors"`
	Leaves  []listedNonTensor `json:"non_tensors"`
}

type listedTensor struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	NBytes int64   `json:"nbytes"`
	SHA256 string  `json:"sha256"`
}

type listedNonTensor struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func readListings(t *testing.T) []listing {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(fixtures, "*.json"))
	if len(paths) < 5 {
		t.Fatalf("only %d DCP fixtures found", len(paths))
	}
	var out []listing
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var l listing
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, l)
	}
	return out
}

// TestFixtures opens every fixture and checks it against what torch reported: the same
// tensors in the same order with the same dtype, shape, size and SHA-256 of their bytes
// (multi-chunk tensors are read through the chunk assembly), the same non-tensor leaves
// with the same Python types and values, and the same chunk counts.
func TestFixtures(t *testing.T) {
	for _, want := range readListings(t) {
		t.Run(want.Dir, func(t *testing.T) {
			dir := filepath.Join(fixtures, want.Dir)
			ck, err := Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Format != Format || want.Format != Format {
				t.Errorf("format %q, listing %q", ck.Format, want.Format)
			}
			var tensors []statedict.NamedTensor
			var leaves []statedict.Leaf
			err = statedict.Walk(ck.Root, "", func(name string, v statedict.Value) error {
				if x, ok := v.(*statedict.Tensor); ok {
					tensors = append(tensors, statedict.NamedTensor{Name: name, Tensor: x})
				} else {
					leaves = append(leaves, statedict.Leaf{Name: name, Value: v})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkTensors(t, tensors, want.Tensors)
			checkLeaves(t, leaves, want.Leaves)
			checkChunked(t, dir, tensors, want.Chunked)
		})
	}
}

func checkTensors(t *testing.T, got []statedict.NamedTensor, want []listedTensor) {
	t.Helper()
	if len(got) != len(want) {
		names := make([]string, len(got))
		for i, g := range got {
			names[i] = g.Name
		}
		t.Fatalf("%d tensors %v, torch lists %d", len(got), names, len(want))
	}
	for i, w := range want {
		g := got[i]
		h := sha256.New()
		n, err := g.Tensor.WriteTo(h)
		if err != nil {
			t.Errorf("%s: %v", g.Name, err)
			continue
		}
		sum := hex.EncodeToString(h.Sum(nil))
		if g.Name != w.Name || g.Tensor.DType.String() != w.DType || !slices.Equal(g.Tensor.Shape, w.Shape) ||
			n != w.NBytes || g.Tensor.NBytes() != w.NBytes || sum != w.SHA256 {
			t.Errorf("tensor %d:\n got  %s %s %v %d bytes %s\n want %s %s %v %d bytes %s", i,
				g.Name, g.Tensor.DType, g.Tensor.Shape, n, sum, w.Name, w.DType, w.Shape, w.NBytes, w.SHA256)
		}
	}
}

// pyType names the Python type torch.load gives a value that decoded to v.
func pyType(v statedict.Value) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case *statedict.Dict:
		return "dict"
	case *statedict.List:
		return "list"
	case statedict.Tuple:
		return "tuple"
	case statedict.DType:
		return "dtype"
	case *statedict.Object:
		return x.Class
	}
	return fmt.Sprintf("%T", v)
}

// pyJSON renders v as gen.py renders the value, for comparison.
func pyJSON(v statedict.Value) (string, bool) {
	var x any
	switch v := v.(type) {
	case nil, bool, int64, float64, string:
		x = v
	case *big.Int:
		return v.String(), true
	case []byte:
		x = hex.EncodeToString(v)
	case complex128:
		x = []float64{real(v), imag(v)}
	case statedict.DType:
		x = "torch." + v.String()
	default:
		return "", false
	}
	b, _ := json.Marshal(x)
	return string(b), true
}

func checkLeaves(t *testing.T, got []statedict.Leaf, want []listedNonTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d non-tensor leaves, torch lists %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || pyType(g.Value) != w.Type {
			t.Errorf("leaf %d: got %s (%s), want %s (%s)", i, g.Name, pyType(g.Value), w.Name, w.Type)
			continue
		}
		if w.Value == nil {
			continue
		}
		gv, ok := pyJSON(g.Value)
		var a, b any
		json.Unmarshal([]byte(gv), &a)
		json.Unmarshal(w.Value, &b)
		if !ok || !reflect.DeepEqual(a, b) {
			t.Errorf("%s = %s, torch %s", w.Name, gv, w.Value)
		}
	}
}

// checkChunked checks the chunk counts torch recorded and that every tensor stored in
// several non-empty chunks is read through a Chunked assembly, not a single chunk.
func checkChunked(t *testing.T, dir string, tensors []statedict.NamedTensor, want map[string]int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	md, err := ReadMetadata(data, MetadataFile)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*statedict.Tensor{}
	for _, nt := range tensors {
		byName[nt.Name] = nt.Tensor
	}
	assembled := 0
	for _, it := range md.Items {
		if it.Tensor == nil {
			continue
		}
		if n := len(it.Tensor.Chunks); n > 1 != (want[it.FQN] > 1) || n > 1 && n != want[it.FQN] {
			t.Errorf("%s: %d chunks, torch wrote %d", it.FQN, n, want[it.FQN])
		}
		nonEmpty := 0
		for _, c := range it.Tensor.Chunks {
			if !slices.Contains(c.Sizes, 0) {
				nonEmpty++
			}
		}
		tensor := byName[it.FQN]
		if tensor == nil {
			continue // a tensor nested under a path whose name differs from the FQN
		}
		_, mapped := tensor.Storage.Mapped()
		isChunked := !mapped
		if isChunked != (nonEmpty > 1) {
			t.Errorf("%s: %d non-empty chunks, read through the assembly: %v", it.FQN, nonEmpty, isChunked)
		}
		if isChunked {
			assembled++
		}
	}
	if len(want) > 0 && assembled == 0 {
		t.Errorf("no tensor was assembled from chunks")
	}
}

// copyFixture copies a fixture folder into a temporary one.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join(fixtures, name)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestMutated opens the sharded fixture with each .metadata of testdata/dcp/mutated and
// checks the error names the right file, item, chunk and byte offset.
func TestMutated(t *testing.T) {
	const (
		meta = ""  // the error is about .metadata
		data = "*" // the error is about the data file the storage entry names
	)
	tests := []struct {
		name   string
		file   string // meta, data, or a data file name
		fqn    string
		chunk  []int64 // nil: no chunk
		offset bool    // whether the error has a byte offset
		is     error
		msg    string
	}{
		{"missing_chunk", meta, "dt.grid", nil, false, nil, "chunks cover 36 of the 48 elements; no chunk holds the element at [3 4]"},
		{"overlap", meta, "dt.grid", []int64{0, 3}, false, nil, "overlaps the chunk at offsets [0 0]"},
		{"out_of_bounds", meta, "dt.grid", []int64{3, 4}, false, nil, "reaches outside the tensor of shape [6 8] in dim 1"},
		{"no_storage", meta, "dt.grid", []int64{3, 0}, false, nil, "chunk has no storage entry"},
		{"escape", meta, "dt.grid", []int64{3, 0}, false, nil, `data file "../sharded/__0_0.distcp": relative path escapes the checkpoint folder`},
		{"absolute", meta, "dt.grid", []int64{3, 0}, false, nil, `data file "/etc/passwd": relative path escapes`},
		{"past_eof", data, "dt.grid", []int64{3, 4}, true, nil, "stored range of 1001577 bytes runs past the end of the"},
		{"missing_file", "__9_0.distcp", "dt.grid", []int64{3, 0}, false, os.ErrNotExist, "data file: statat __9_0.distcp: no such file"},
		{"transform", data, "dt.grid", []int64{0, 4}, true, ckpterr.ErrUnsupported, `stream transforms ["stream.aes/1"]`},
		{"dtype_mismatch", data, "dt.grid", []int64{0, 0}, true, nil, "stored tensor is float32 [3 4], the metadata says float64 [3 4]"},
		{"evil_global", meta, "", nil, true, pickle.ErrNotAllowed, "unsupported global: STACK_GLOBAL posix.system"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, "sharded")
			mdb, err := os.ReadFile(filepath.Join(fixtures, "mutated", tc.name+".metadata"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), mdb, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Open(context.Background(), dir)
			var de *ckpterr.FormatError
			if !errors.As(err, &de) || de.Format != Format {
				t.Fatalf("error %v (%T), want a dcp *ckpterr.FormatError", err, err)
			}
			wantFile := filepath.Join(dir, MetadataFile)
			var wantOff int64 = -1
			switch tc.file {
			case meta:
			case data:
				md, err := ReadMetadata(mdb, "m")
				if err != nil {
					t.Fatal(err)
				}
				e, ok := md.Lookup(tc.fqn, tc.chunk)
				if !ok {
					t.Fatalf("no storage entry for %s %v", tc.fqn, tc.chunk)
				}
				wantFile, wantOff = filepath.Join(dir, e.RelativePath), e.Offset
			default:
				wantFile = filepath.Join(dir, tc.file)
			}
			// The chunk's offsets open the cause.
			if chunk := fmt.Sprintf("chunk at %v: ", tc.chunk); de.File != wantFile || de.Item != tc.fqn ||
				strings.HasPrefix(de.Err.Error(), "chunk at ") != (tc.chunk != nil) || tc.chunk != nil && !strings.HasPrefix(de.Err.Error(), chunk) {
				t.Errorf("error names %s %q %q, want %s %q chunk %v", de.File, de.Item, de.Err, wantFile, tc.fqn, tc.chunk)
			}
			if tc.offset != (de.Offset >= 0) || wantOff >= 0 && de.Offset != wantOff {
				t.Errorf("error offset %d, want %d (offset expected: %v)", de.Offset, wantOff, tc.offset)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
		})
	}
}

// TestSymlinkEscape refuses a data file that is a symlink leading out of the folder, though
// its name is local.
func TestSymlinkEscape(t *testing.T) {
	dir := copyFixture(t, "legacy113")
	outside := filepath.Join(t.TempDir(), "secret")
	b, _ := os.ReadFile(filepath.Join(dir, "__0_0.distcp"))
	os.WriteFile(outside, b, 0o644)
	os.Remove(filepath.Join(dir, "__0_0.distcp"))
	if err := os.Symlink(outside, filepath.Join(dir, "__0_0.distcp")); err != nil {
		t.Skip(err)
	}
	_, err := Open(context.Background(), dir)
	var de *ckpterr.FormatError
	if !errors.As(err, &de) || de.File != filepath.Join(dir, "__0_0.distcp") || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("error %v, want a dcp *ckpterr.FormatError about __0_0.distcp escaping the folder", err)
	}
}

// TestVariants opens legal variations of the sharded fixture's metadata.
func TestVariants(t *testing.T) {
	base, err := Open(context.Background(), filepath.Join(fixtures, "sharded"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	baseTensors, _ := base.Tensors()
	tests := []struct {
		name  string
		check func(t *testing.T, ck *statedict.Checkpoint, md *Metadata)
	}{
		{"parts_path", func(t *testing.T, ck *statedict.Checkpoint, md *Metadata) {
			if md.StorageMeta == nil || md.StorageMeta.CheckpointID != "/tmp/ck" {
				t.Errorf("checkpoint_id PosixPath('/', 'tmp', 'ck') read as %+v", md.StorageMeta)
			}
		}},
		{"no_planner_data", func(t *testing.T, ck *statedict.Checkpoint, md *Metadata) {
			root := ck.Root.(*statedict.Dict)
			if root.Len() != len(md.Items) {
				t.Errorf("%d top-level keys for %d items", root.Len(), len(md.Items))
			}
			for i, e := range root.Entries() {
				if e.Key != md.Items[i].FQN {
					t.Fatalf("key %d is %v, want %s", i, e.Key, md.Items[i].FQN)
				}
			}
			tensors, _ := ck.Tensors()
			if len(tensors) != len(baseTensors) {
				t.Errorf("%d tensors, the nested checkpoint has %d", len(tensors), len(baseTensors))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, "sharded")
			mdb, err := os.ReadFile(filepath.Join(fixtures, "mutated", tc.name+".metadata"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), mdb, 0o644); err != nil {
				t.Fatal(err)
			}
			ck, err := Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			md, err := ReadMetadata(mdb, MetadataFile)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, ck, md)
		})
	}
}

// TestReadMetadata checks decoded fields of real files, torch 2.14 and 1.13-shaped.
func TestReadMetadata(t *testing.T) {
	tests := []struct {
		dir     string
		version string
		meta    *StorageMeta
		fqn     string
		path    Path
		tensor  *TensorMeta
	}{
		{"model", "1.0.0", &StorageMeta{CheckpointID: "testdata/dcp/model", SaveID: "00000000-0000-4000-8000-000000000000", Modules: nil},
			"optim.param_groups.0.lr", Path{"optim", "param_groups", int64(0), "lr"}, nil},
		{"model", "1.0.0", &StorageMeta{CheckpointID: "testdata/dcp/model", SaveID: "00000000-0000-4000-8000-000000000000"},
			"optim.state.l1.weight.step", Path{"optim", "state", "l1.weight", "step"},
			&TensorMeta{DType: statedict.Float32, Size: []int64{}, Chunks: []ChunkMeta{{Offsets: []int64{}, Sizes: []int64{}}}}},
		// A top-level key's path, ("w",), is left out of PlannerData.
		{"legacy113", "", nil, "w", nil,
			&TensorMeta{DType: statedict.Float32, Size: []int64{3, 2}, Chunks: []ChunkMeta{{Offsets: []int64{0, 0}, Sizes: []int64{3, 2}}}}},
		{"sharded", "1.0.0", &StorageMeta{CheckpointID: "testdata/dcp/sharded", SaveID: "00000000-0000-4000-8000-000000000000"},
			"dt.tiny", Path{"dt", "tiny"},
			&TensorMeta{DType: statedict.Float32, Size: []int64{1, 3}, Chunks: []ChunkMeta{
				{Offsets: []int64{0, 0}, Sizes: []int64{1, 3}}, {Offsets: []int64{1, 0}, Sizes: []int64{0, 3}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.dir+"/"+tc.fqn, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(fixtures, tc.dir, MetadataFile))
			if err != nil {
				t.Fatal(err)
			}
			md, err := ReadMetadata(b, MetadataFile)
			if err != nil {
				t.Fatal(err)
			}
			if md.Version != tc.version || !reflect.DeepEqual(md.StorageMeta, tc.meta) {
				t.Errorf("version %q storage meta %+v, want %q %+v", md.Version, md.StorageMeta, tc.version, tc.meta)
			}
			if p := md.PlannerData[tc.fqn]; !reflect.DeepEqual(p, tc.path) {
				t.Errorf("path %v, want %v", p, tc.path)
			}
			it, ok := md.Item(tc.fqn)
			if !ok || !reflect.DeepEqual(it.Tensor, tc.tensor) {
				t.Errorf("item %+v, want %+v", it, tc.tensor)
			}
		})
	}
}

// TestOpenErrors covers folders that are not DCP checkpoints.
func TestOpenErrors(t *testing.T) {
	empty := t.TempDir()
	perRank := t.TempDir()
	os.WriteFile(filepath.Join(perRank, "__0.metadata"), []byte("x"), 0o644)
	trailing := copyFixture(t, "legacy113")
	b, _ := os.ReadFile(filepath.Join(trailing, MetadataFile))
	os.WriteFile(filepath.Join(trailing, MetadataFile), append(b, 0), 0o644)
	tests := []struct {
		dir string
		is  error
		msg string
	}{
		{empty, os.ErrNotExist, ".metadata"},
		{perRank, ckpterr.ErrUnsupported, "per-rank __0.metadata files"},
		{trailing, nil, "1 bytes after the end of the pickle"},
	}
	for _, tc := range tests {
		_, err := Open(context.Background(), tc.dir)
		if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %v containing %q", tc.dir, err, tc.is, tc.msg)
		}
	}
}

// TestZstdPlain: an item that .metadata says is zstd-compressed but is not opens (items are
// inflated lazily), and reading it fails as corrupt, naming the data file, the item and its
// byte offset; the other chunks of the tensor's checkpoint still read.
func TestZstdPlain(t *testing.T) {
	dir := copyFixture(t, "sharded")
	mdb, err := os.ReadFile(filepath.Join(fixtures, "mutated", "zstd_plain.metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataFile), mdb, 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	md, err := ReadMetadata(mdb, "m")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := md.Lookup("dt.grid", []int64{0, 4})
	tensors, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range tensors {
		_, err := nt.Tensor.WriteTo(io.Discard)
		if nt.Name != "dt.grid" {
			if err != nil {
				t.Errorf("%s: %v", nt.Name, err)
			}
			continue
		}
		var de *ckpterr.FormatError
		if !errors.As(err, &de) || !errors.Is(err, ckpterr.ErrCorrupt) {
			t.Fatalf("dt.grid: %v (%T), want a corrupt dcp *ckpterr.FormatError", err, err)
		}
		if de.File != filepath.Join(dir, e.RelativePath) || de.Offset != e.Offset || de.Item != "dt.grid" {
			t.Errorf("error names %s at %d (%s), want %s at %d", de.File, de.Offset, de.Item, e.RelativePath, e.Offset)
		}
	}
}

// TestFileRank reads the rank from torch's data file names and refuses other names.
func TestFileRank(t *testing.T) {
	for _, c := range []struct {
		name string
		rank int
		ok   bool
	}{
		{"__0_0.distcp", 0, true},
		{"__13_2.distcp", 13, true},
		{"sub/__3_0.distcp", 3, true},
		{"__03_0.distcp", 0, false},
		{"__-1_0.distcp", 0, false},
		{"__1.distcp", 0, false},
		{"__1_0.metadata", 0, false},
		{"model_0.distcp", 0, false},
	} {
		r, ok := FileRank(c.name)
		if r != c.rank || ok != c.ok {
			t.Errorf("FileRank(%q) = %d, %v; want %d, %v", c.name, r, ok, c.rank, c.ok)
		}
	}
}

// TestManySmallDictsLinear: a .metadata of many small dicts shaped like planner_data
// (str → tuple of str) is decoded in time linear in its size. Each such dict is claimed as
// it is built, and finding the state_dict_metadata claim once searched every claim held:
// 200 KB of them took 2 s, a few MB hours.
func TestManySmallDictsLinear(t *testing.T) {
	const n = 200_000 // 2 MB of `{"k": ("x",)}`; quadratic would take minutes at least
	var b bytes.Buffer
	b.Write([]byte{0x80, 4})
	for range n {
		b.Write([]byte{'}', 0x8c, 1, 'k', 0x8c, 1, 'x', 0x85, 's', '0'})
	}
	b.Write([]byte{'N', '.'})
	done := make(chan error, 1)
	go func() {
		_, err := ReadMetadata(b.Bytes(), "many.metadata")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a pickle of dicts decoded as DCP metadata")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("decoding 2 MB of small dicts took over a minute")
	}
}
