package formats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
)

type hfListing struct {
	Format  string `json:"format"`
	Tensors []struct {
		Name   string  `json:"name"`
		DType  string  `json:"dtype"`
		Shape  []int64 `json:"shape"`
		NBytes int64   `json:"nbytes"`
		SHA256 string  `json:"sha256"`
	} `json:"tensors"`
	Extras []string `json:"extras"`
}

// TestHFFolders checks the Hugging Face folders written by transformers' save_pretrained
// (and a sharded .bin folder) against what safetensors and torch report about them, as
// plain folders and laid out as a Hugging Face hub cache snapshot (every file a symbolic
// link to a blob elsewhere), which is how models downloaded with transformers are stored.
func TestHFFolders(t *testing.T) {
	for _, name := range []string{"qwen3_moe_sharded", "mistral_sharded", "mistral_bin_sharded",
		"qwen3_moe_sharded (hub cache)", "mistral_sharded (hub cache)", "mistral_bin_sharded (hub cache)"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../testdata/hf", name)
			if fixture, ok := strings.CutSuffix(name, " (hub cache)"); ok {
				name = fixture
				dir = hubSnapshot(t, filepath.Join("../testdata/hf", name))
			}
			var want hfListing
			b, err := os.ReadFile(filepath.Join("../testdata/hf", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			ck, err := formats.Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Format != want.Format {
				t.Errorf("format %q, want %q", ck.Format, want.Format)
			}
			rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Tensors
			sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
			if len(got) != len(want.Tensors) {
				t.Fatalf("%d tensors, want %d", len(got), len(want.Tensors))
			}
			for i, w := range want.Tensors {
				g := got[i]
				if g.Name != w.Name || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) || g.NBytes != w.NBytes || g.SHA256 != w.SHA256 {
					t.Errorf("got %s %s %v %d %s, want %s %s %v %d %s", g.Name, g.DType, g.Shape, g.NBytes, g.SHA256[:8], w.Name, w.DType, w.Shape, w.NBytes, w.SHA256[:8])
				}
			}
			extras := append([]string{}, ck.Extras...)
			sort.Strings(extras)
			if !reflect.DeepEqual(extras, want.Extras) {
				t.Errorf("extras %v, want %v", extras, want.Extras)
			}
		})
	}
}

// hubSnapshot lays the fixture folder src out as the Hugging Face hub cache does: the files
// in blobs/ under their hashes, and snapshots/REV/ holding a relative symbolic link per file.
// It returns the snapshot folder.
func hubSnapshot(t *testing.T, src string) string {
	t.Helper()
	root := t.TempDir()
	snap := filepath.Join(root, "snapshots", "0123abcd")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "blobs"), 0o755)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		blob := fmt.Sprintf("blob%04d", i)
		if err := os.WriteFile(filepath.Join(root, "blobs", blob), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

// copyDir copies a fixture folder so a test can damage it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
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

// TestHFFolderErrors damages a sharded folder in each way index and shards can disagree.
func TestHFFolderErrors(t *testing.T) {
	const src = "../testdata/hf/mistral_sharded"
	editIndex := func(t *testing.T, dir string, edit func(m map[string]any)) {
		p := filepath.Join(dir, "model.safetensors.index.json")
		b, _ := os.ReadFile(p)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ = json.Marshal(m)
		os.WriteFile(p, b, 0o644)
	}
	wm := func(m map[string]any) map[string]any { return m["weight_map"].(map[string]any) }
	cases := []struct {
		name, want string
		damage     func(t *testing.T, dir string)
	}{
		{"missing shard", "shard model-00002-of-00004.safetensors is missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00004.safetensors"))
		}},
		{"extra shard", "shard model-00009-of-00009.safetensors is in the folder", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "model-00001-of-00004.safetensors"))
			os.WriteFile(filepath.Join(dir, "model-00009-of-00009.safetensors"), b, 0o644)
		}},
		{"wrong shard", "but the index maps it to", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]any) {
				w := wm(m)
				for k, v := range w {
					if v == "model-00001-of-00004.safetensors" {
						w[k] = "model-00002-of-00004.safetensors"
						break
					}
				}
			})
		}},
		{"not in index", "is not in the index", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]any) {
				w := wm(m)
				for k, v := range w {
					if v == "model-00003-of-00004.safetensors" {
						delete(w, k)
						break
					}
				}
			})
		}},
		{"index names absent tensor", "which does not contain it", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]any) { wm(m)["model.ghost.weight"] = "model-00001-of-00004.safetensors" })
		}},
		{"path escape", "is not a file in the folder", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]any) { wm(m)["model.ghost.weight"] = "../model-00001-of-00004.safetensors" })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, src)
			c.damage(t, dir)
			ck, err := formats.Open(context.Background(), dir)
			if err == nil {
				ck.Close()
				t.Fatal("damaged folder opened without error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestHFFolderOtherWeights: weights of another layout next to the ones read (Mistral's
// consolidated.safetensors, an old pytorch_model.bin) and a Trainer checkpoint's pickles are
// listed as ignored, not as files to carry along; configuration files still are.
func TestHFFolderOtherWeights(t *testing.T) {
	dir := copyDir(t, "../testdata/hf/mistral_sharded")
	for _, name := range []string{"consolidated.safetensors", "pytorch_model.bin", "pytorch_model.bin.index.json",
		"optimizer.pt", "rng_state.pth", "training_args.bin", "params.json", "tokenizer.model"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ck, err := formats.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	extras, ignored := append([]string{}, ck.Extras...), append([]string{}, ck.Ignored...)
	sort.Strings(extras)
	sort.Strings(ignored)
	if want := []string{"config.json", "generation_config.json", "params.json", "tokenizer.model"}; !reflect.DeepEqual(extras, want) {
		t.Errorf("extras %v, want %v", extras, want)
	}
	if want := []string{"consolidated.safetensors", "optimizer.pt", "pytorch_model.bin", "pytorch_model.bin.index.json",
		"rng_state.pth", "training_args.bin"}; !reflect.DeepEqual(ignored, want) {
		t.Errorf("ignored %v, want %v", ignored, want)
	}
}

// TestFolderOfOtherLayout: a folder ckpt does not read as a whole (weights under names no
// library loads by) is refused with an error naming the files that can be read.
func TestFolderOfOtherLayout(t *testing.T) {
	dir := t.TempDir()
	st, err := os.ReadFile("../testdata/safetensors/every_dtype.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "weights_ema.safetensors"), st, 0o644)
	os.WriteFile(filepath.Join(dir, "notes.json"), []byte("{}"), 0o644)
	_, err = formats.Open(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "not a checkpoint folder") || !strings.Contains(err.Error(), "it holds weights_ema.safetensors") {
		t.Fatalf("got %v", err)
	}
	if _, err := formats.Open(context.Background(), filepath.Join(dir, "weights_ema.safetensors")); err != nil {
		t.Fatalf("the file named in the error does not open: %v", err)
	}
}
