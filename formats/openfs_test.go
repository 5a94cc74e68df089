package formats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// openedTensor is a tensor as read, with its bytes.
type openedTensor struct {
	name, view string
	data       []byte
}

// readAll reads a checkpoint's format and tensors with their bytes, or gives the error opening it gave.
func readAll(t *testing.T, open func() (*statedict.Checkpoint, error)) (string, []openedTensor, error) {
	t.Helper()
	ck, err := open()
	if err != nil {
		return "", nil, err
	}
	defer ck.Close()
	tensors, err := ck.Tensors()
	if err != nil {
		return "", nil, err
	}
	out := make([]openedTensor, len(tensors))
	for i, nt := range tensors {
		// The logical value, or for a view far larger than its bytes (a hostile expand of
		// 256 GiB over 4 bytes) the storage's bytes and the view over them.
		tn := nt.Tensor
		view := fmt.Sprint(tn.DType, tn.Shape, tn.Strides, tn.Offset)
		var b []byte
		if tn.NBytes() <= 64<<20 {
			b, err = tn.Bytes()
		} else {
			b = make([]byte, tn.Storage.Size)
			_, err = tn.Storage.ReadAt(b, 0)
		}
		if err != nil {
			return "", nil, err
		}
		out[i] = openedTensor{nt.Name, view, bytes.Clone(b)}
	}
	return ck.Format, out, nil
}

// sameAs asserts that what a path-free open gave equals what Open(path) gave: the same
// format and tensors, byte for byte, or errors of the same kind.
func sameAs(t *testing.T, how, fixture string, open func() (*statedict.Checkpoint, error)) {
	t.Helper()
	sameAsWith(t, how, fixture, formats.OpenOptions{}, open)
}

// sameAsWith is sameAs against OpenWith(fixture, opts).
func sameAsWith(t *testing.T, how, fixture string, opts formats.OpenOptions, open func() (*statedict.Checkpoint, error)) {
	t.Helper()
	wantFormat, want, wantErr := readAll(t, func() (*statedict.Checkpoint, error) { return formats.OpenWith(context.Background(), fixture, opts) })
	format, got, err := readAll(t, open)
	if wantErr != nil || err != nil {
		for _, kind := range []error{ckpterr.ErrCorrupt, ckpterr.ErrUnsupported, ckpterr.ErrDangerous} {
			if errors.Is(err, kind) != errors.Is(wantErr, kind) {
				t.Fatalf("%s: error %v; Open(path) gave %v", how, err, wantErr)
			}
		}
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v; Open(path) gave %v", how, err, wantErr)
		}
		return
	}
	if format != wantFormat || len(got) != len(want) {
		t.Fatalf("%s: %s with %d tensors; Open(path) gave %s with %d", how, format, len(got), wantFormat, len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.name != w.name || g.view != w.view || !bytes.Equal(g.data, w.data) {
			t.Fatalf("%s: tensor %d is %s %s (%d bytes); Open(path) gave %s %s (%d bytes)", how, i, g.name, g.view, len(g.data), w.name, w.view, len(w.data))
		}
	}
}

// mapFS copies the files under dir (slash name prefix) into an in-memory fs.FS.
func mapFS(t *testing.T, root, under string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(under)), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b, Mode: 0o444}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every single-file fixture reads the same through OpenFile (an *os.File and a
// bytes.Reader, no path) and OpenFS (os.DirFS and fstest.MapFS) as through Open(path):
// torch.save zip, legacy and CUDA archives, Lightning and fairseq objects, .nemo archives,
// safetensors, and hostile files that fail the same way.
func TestOpenFileSameAsOpen(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../testdata/torch/*.pt", "../testdata/ecosystem/objects/*", "../testdata/ecosystem/megatron/nemo1/*.nemo",
		"../testdata/hostile/*.pt", "../testdata/hostile/round3/*.nemo"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	files = append(files, "../testdata/safetensors/every_dtype.safetensors",
		"../testdata/ecosystem/folders/lora_kohya.safetensors",
		"../testdata/ecosystem/zero/zero2/global_step3/mp_rank_00_model_states.pt",
		"../testdata/safetensors/crafted/overlap.safetensors")
	if len(files) < 10 {
		t.Fatalf("only %d fixtures", len(files))
	}
	ctx := context.Background()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			sameAs(t, "OpenFile(*os.File)", file, func() (*statedict.Checkpoint, error) { return formats.OpenFile(ctx, f, st.Size(), filepath.Base(file)) })
			data, _ := os.ReadFile(file)
			sameAs(t, "OpenFile(*bytes.Reader)", file, func() (*statedict.Checkpoint, error) {
				return formats.OpenFile(ctx, bytes.NewReader(data), int64(len(data)), filepath.Base(file))
			})
			dir, base := filepath.Split(file)
			sameAs(t, "OpenFS(os.DirFS)", file, func() (*statedict.Checkpoint, error) { return formats.OpenFS(ctx, os.DirFS(dir), base) })
			sameAs(t, "OpenFS(MapFS)", file, func() (*statedict.Checkpoint, error) {
				return formats.OpenFS(ctx, fstest.MapFS{"sub/" + base: {Data: data}}, "sub/"+base)
			})
		})
	}
}

// Every folder layout reads the same through OpenFS — os.DirFS over testdata and an
// fstest.MapFS holding only the folder's files — as through Open(path): the readers open
// the siblings they need (shards, indexes, .metadata, ranks' files) through the fs.FS.
func TestOpenFSFolders(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{
		"hf/mistral_sharded", "hf/mistral_bin_sharded", "hf/qwen3_moe_sharded",
		"dcp/model", "dcp/sharded", "dcp/safetensors",
		"ecosystem/zero/zero3", "ecosystem/zero/zero2",
		"ecosystem/folders/peft", "ecosystem/folders/pipeline", "ecosystem/folders/accelerate_fsdp",
		"ecosystem/folders/trainer/checkpoint-2", "ecosystem/dcp/zstd",
		"ecosystem/megatron/gpt_tp2pp2", "ecosystem/megatron/torch_dist", "ecosystem/megatron/nemo2",
		// A ZeRO-3 rank's model states read as their folder's consolidated checkpoint.
		"ecosystem/zero/zero3/global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt",
	} {
		t.Run(name, func(t *testing.T) {
			fixture := filepath.Join("../testdata", filepath.FromSlash(name))
			sameAs(t, "OpenFS(os.DirFS)", fixture, func() (*statedict.Checkpoint, error) { return formats.OpenFS(ctx, os.DirFS("../testdata"), name) })
			under := name
			if st, err := os.Stat(fixture); err == nil && !st.IsDir() {
				under = path.Dir(path.Dir(name)) // the ZeRO folder
			}
			sameAs(t, "OpenFS(MapFS)", fixture, func() (*statedict.Checkpoint, error) {
				return formats.OpenFS(ctx, mapFS(t, "../testdata", under), name)
			})
		})
	}
}

// OpenFSWith takes Open's options: a ZeRO folder read through an fs.FS with its optimizer
// state consolidated gives what OpenWith(path) gives, model and optimizer.
func TestOpenFSWithZeROOptimizer(t *testing.T) {
	ctx := context.Background()
	opts := formats.OpenOptions{ZeROOptimizer: true}
	for _, name := range []string{"ecosystem/zero/zero2", "ecosystem/zero/zero3"} {
		t.Run(name, func(t *testing.T) {
			fixture := filepath.Join("../testdata", filepath.FromSlash(name))
			open := func() (*statedict.Checkpoint, error) {
				return formats.OpenFSWith(ctx, mapFS(t, "../testdata", name), name, opts)
			}
			sameAsWith(t, "OpenFSWith(MapFS)", fixture, opts, open)
			sameAsWith(t, "OpenFSWith(os.DirFS)", fixture, opts, func() (*statedict.Checkpoint, error) {
				return formats.OpenFSWith(ctx, os.DirFS("../testdata"), name, opts)
			})
			_, got, err := readAll(t, open)
			if err != nil {
				t.Fatal(err)
			}
			var optim int
			for _, g := range got {
				if strings.HasPrefix(g.name, "optimizer.") {
					optim++
				}
			}
			if optim == 0 {
				t.Errorf("no optimizer state among %d tensors", len(got))
			}
		})
	}
}

// The checkpoint's extra files (config.json, tokenizer files) come through the fs.FS too,
// messages name files as fs:///name, and full reads stream the same bytes.
func TestOpenFSFiles(t *testing.T) {
	ck, err := formats.OpenFS(context.Background(), os.DirFS("../testdata/hf"), "mistral_sharded")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Path != "fs:///mistral_sharded" {
		t.Errorf("Path %q", ck.Path)
	}
	got, err := fs.ReadFile(ck.Files, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("../testdata/hf/mistral_sharded/config.json")
	if !bytes.Equal(got, want) {
		t.Errorf("config.json through ck.Files differs from the file")
	}
	// ReadTensors, the full read of inspect, check and verify, streams what Bytes gives.
	tensors, _ := ck.Tensors()
	bufs := make([]bytes.Buffer, len(tensors))
	if err := statedict.ReadTensors(context.Background(), tensors, func(i int) io.Writer { return &bufs[i] }, statedict.ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, nt := range tensors {
		b, err := nt.Tensor.Bytes()
		if err != nil || len(b) == 0 || !bytes.Equal(b, bufs[i].Bytes()) {
			t.Errorf("%s: ReadTensors gave %d bytes, Bytes %d (%v)", nt.Name, bufs[i].Len(), len(b), err)
		}
	}
}

// noReadAt is an fs.FS whose files have Read but no ReadAt (as archive/zip's).
type noReadAt struct{ fs.FS }

func (n noReadAt) Open(name string) (fs.File, error) {
	f, err := n.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if _, ok := f.(fs.ReadDirFile); ok {
		return f, nil
	}
	return struct{ fs.File }{f}, nil
}

// lying is an fs.FS whose one file says it is small and is not.
type lying struct{ size int64 }

func (l lying) Open(name string) (fs.File, error) {
	if name != "big.safetensors" {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &lyingFile{l.size, 0}, nil
}

type lyingFile struct{ size, read int64 }

func (f *lyingFile) Stat() (fs.FileInfo, error) {
	return storage.FileInfo("big.safetensors", f.size, false), nil
}
func (f *lyingFile) Read(p []byte) (int, error) {
	if f.read > storage.MaxWithoutReaderAt+1<<20 {
		return 0, errors.New("read far past the bound")
	}
	f.read += int64(len(p))
	return len(p), nil
}
func (f *lyingFile) Close() error { return nil }

// Hostile callers and files: names leaving the fs.FS, files without ReadAt (small read,
// large refused — also when Stat lies), a size smaller or larger than the bytes, a folder
// or a partial checkpoint given to OpenFile, a cancelled context.
func TestOpenFSHostile(t *testing.T) {
	ctx := context.Background()
	testdata := os.DirFS("../testdata")
	for _, name := range []string{"../testdata/torch/views.pt", "hf/../../go.mod", "/etc/passwd", "hf/./mistral_sharded", "", "hf//mistral_sharded", `torch\views.pt`} {
		_, err := formats.OpenFS(ctx, testdata, name)
		if name == `torch\views.pt` { // a valid name that does not exist (backslash is not a separator)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("OpenFS(%q): %v, want not-exist", name, err)
			}
			continue
		}
		if !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("OpenFS(%q): %v, want fs.ErrInvalid", name, err)
		}
	}

	// A shard index naming a file outside the folder still reads inside fsys: path
	// cleaning keeps "../.." under fs:///, and fsys refuses what is not in it.
	idx, _ := os.ReadFile("../testdata/hf/mistral_sharded/model.safetensors.index.json")
	m := mapFS(t, "../testdata", "hf/mistral_sharded")
	m["hf/mistral_sharded/model.safetensors.index.json"] = &fstest.MapFile{Data: bytes.ReplaceAll(idx, []byte(`"model-00001-of-00004.safetensors"`), []byte(`"../../../../etc/passwd"`))}
	if _, err := formats.OpenFS(ctx, m, "hf/mistral_sharded"); err == nil || strings.Contains(err.Error(), "root:") {
		t.Errorf("an index naming ../../etc/passwd: %v", err)
	}

	// Files without ReadAt: a small checkpoint is read into memory and equals Open(path).
	sameAs(t, "OpenFS(no ReadAt)", "../testdata/hf/mistral_sharded", func() (*statedict.Checkpoint, error) {
		return formats.OpenFS(ctx, noReadAt{testdata}, "hf/mistral_sharded")
	})
	// A large one is refused before it is read, and one whose Stat lies is cut at the bound.
	for _, size := range []int64{storage.MaxWithoutReaderAt + 1, 1 << 40, 100} {
		_, err := formats.OpenFS(ctx, lying{size}, "big.safetensors")
		if !errors.Is(err, storage.ErrNoReaderAt) || !strings.Contains(err.Error(), "fs:///big.safetensors") {
			t.Errorf("size %d without ReadAt: %v, want ErrNoReaderAt naming the file", size, err)
		}
	}

	// A size smaller than the file (or larger than the reader's bytes) reads as the
	// truncated file it describes: an error naming it, no panic, never bytes past size.
	data, _ := os.ReadFile("../testdata/torch/views.pt")
	for _, cut := range []int64{0, 3, 100, int64(len(data)) / 2, int64(len(data)) - 1} {
		_, err := formats.OpenFile(ctx, bytes.NewReader(data), cut, "views.pt")
		if err == nil || !strings.Contains(err.Error(), "fs:///views.pt") {
			t.Errorf("size %d of %d: %v", cut, len(data), err)
		}
	}
	if _, err := formats.OpenFile(ctx, bytes.NewReader(data[:len(data)/2]), int64(len(data)), "views.pt"); err == nil {
		t.Errorf("a size past the reader's bytes read without error")
	}
	if _, err := formats.OpenFile(ctx, bytes.NewReader(data), -1, "views.pt"); !errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("size -1: %v", err)
	}

	// OpenFile reads single files: a folder's index or a ZeRO-3 rank's partial model
	// states are refused, naming the file.
	for _, file := range []string{"../testdata/hf/mistral_sharded/model.safetensors.index.json", "../testdata/dcp/model/.metadata",
		"../testdata/ecosystem/zero/zero3/global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt"} {
		b, _ := os.ReadFile(file)
		_, err := formats.OpenFile(ctx, bytes.NewReader(b), int64(len(b)), filepath.Base(file))
		if err == nil || !strings.Contains(err.Error(), "fs:///"+filepath.Base(file)) || !strings.Contains(err.Error(), "folder") {
			t.Errorf("OpenFile(%s): %v", file, err)
		}
	}

	// A context that ends stops the reads of a checkpoint already open.
	cctx, cancel := context.WithCancel(ctx)
	ck, err := formats.OpenFS(cctx, testdata, "hf/mistral_sharded")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cancel()
	tensors, _ := ck.Tensors()
	var readErr error
	for _, nt := range tensors {
		if _, readErr = nt.Tensor.Bytes(); readErr != nil {
			break
		}
	}
	if !errors.Is(readErr, context.Canceled) {
		t.Errorf("reads after cancel: %v", readErr)
	}
}
