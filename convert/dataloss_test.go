package convert_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
)

// snapshot records every file under dir with its content, to prove nothing changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, _ := os.ReadFile(p)
		out[rel] = string(b)
		return nil
	})
	return out
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	os.MkdirAll(to, 0o755)
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(to, e.Name()), b, 0o644)
	}
}

// TestForceNeverDeletesForeign: --force replaces only what an earlier conversion wrote, as
// its manifest proves it (each file's size and xxhash64); a folder holding anything else, a
// forged manifest, a file edited since, a user's file, a destination containing the source
// or inside it and the source itself are refused, and nothing on disk changes (issue 14,
// item 1; issue 29, class 2).
func TestForceNeverDeletesForeign(t *testing.T) {
	pt, err := os.ReadFile("../testdata/torch/training_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	type setup struct{ src, dst, root string }
	cases := []struct {
		name   string
		make   func(t *testing.T, base string) setup
		format formats.Layout
		want   string
	}{
		{"models folder with a subfolder", func(t *testing.T, base string) setup {
			os.MkdirAll(filepath.Join(base, "models", "llama"), 0o755)
			os.WriteFile(filepath.Join(base, "models", "llama", "keep.bin"), []byte("keep"), 0o644)
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			return setup{filepath.Join(base, "in.pt"), filepath.Join(base, "models"), base}
		}, formats.DCPFolder, "llama"},
		{"folder holding the source", func(t *testing.T, base string) setup {
			os.MkdirAll(filepath.Join(base, "proj"), 0o755)
			os.WriteFile(filepath.Join(base, "proj", "in.pt"), pt, 0o644)
			return setup{filepath.Join(base, "proj", "in.pt"), filepath.Join(base, "proj"), base}
		}, formats.SafetensorsFile, "contains the source"},
		{"the source itself", func(t *testing.T, base string) setup {
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			return setup{filepath.Join(base, "in.pt"), filepath.Join(base, "in.pt"), base}
		}, formats.TorchFile, "the source itself"},
		{"the source through a link", func(t *testing.T, base string) setup {
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			os.Symlink("in.pt", filepath.Join(base, "link.pt"))
			return setup{filepath.Join(base, "link.pt"), filepath.Join(base, "in.pt"), base}
		}, formats.TorchFile, "the source itself"},
		{"inside the source folder", func(t *testing.T, base string) setup {
			copyTree(t, "../testdata/hf/mistral_sharded", filepath.Join(base, "hf"))
			return setup{filepath.Join(base, "hf"), filepath.Join(base, "hf", "out"), base}
		}, formats.SafetensorsFile, "inside the source folder"},
		{"a folder of another conversion's files plus one of the user's", func(t *testing.T, base string) setup {
			copyTree(t, "../testdata/hf/mistral_sharded", filepath.Join(base, "hf"))
			if _, err := convert.Run(t.Context(), convert.Options{Src: filepath.Join(base, "hf"), Dst: filepath.Join(base, "out"), Format: formats.SafetensorsFile}); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(base, "out", "NOTES.md"), []byte("mine"), 0o644)
			return setup{filepath.Join(base, "hf"), filepath.Join(base, "out"), base}
		}, formats.SafetensorsFile, "NOTES.md"},
		{"a forged manifest naming the user's files", func(t *testing.T, base string) setup {
			copyTree(t, "../testdata/hf/mistral_sharded", filepath.Join(base, "hf"))
			os.MkdirAll(filepath.Join(base, "out"), 0o755)
			os.WriteFile(filepath.Join(base, "out", "NOTES.md"), []byte("mine"), 0o644)
			os.WriteFile(filepath.Join(base, "out", "ckpt-manifest.json"), []byte(`{"tool":"ckpt","output":{"files":["NOTES.md"]},"tensors":[]}`), 0o644)
			return setup{filepath.Join(base, "hf"), filepath.Join(base, "out"), base}
		}, formats.SafetensorsFile, "NOTES.md"},
		{"a forged manifest with sums of other bytes", func(t *testing.T, base string) setup {
			copyTree(t, "../testdata/hf/mistral_sharded", filepath.Join(base, "hf"))
			os.MkdirAll(filepath.Join(base, "out"), 0o755)
			os.WriteFile(filepath.Join(base, "out", "NOTES.md"), []byte("mine"), 0o644)
			os.WriteFile(filepath.Join(base, "out", "ckpt-manifest.json"), []byte(`{"tool":"ckpt","output":{"files":["NOTES.md"],"sums":{"NOTES.md":{"size":4,"xxhash64":"0123456789abcdef"}}},"tensors":[]}`), 0o644)
			return setup{filepath.Join(base, "hf"), filepath.Join(base, "out"), base}
		}, formats.SafetensorsFile, "NOTES.md"},
		{"an earlier output with a file edited since", func(t *testing.T, base string) setup {
			copyTree(t, "../testdata/hf/mistral_sharded", filepath.Join(base, "hf"))
			if _, err := convert.Run(t.Context(), convert.Options{Src: filepath.Join(base, "hf"), Dst: filepath.Join(base, "out"), Format: formats.SafetensorsFile}); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(base, "out", "config.json"), []byte(`{"edited": true}`), 0o644)
			return setup{filepath.Join(base, "hf"), filepath.Join(base, "out"), base}
		}, formats.SafetensorsFile, "config.json"},
		{"a user's file with a forged manifest beside it", func(t *testing.T, base string) setup {
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			os.WriteFile(filepath.Join(base, "out.pt"), []byte("my own checkpoint"), 0o644)
			os.WriteFile(filepath.Join(base, "out.pt.ckpt-manifest.json"), []byte(`{"tool":"ckpt","output":{"files":["out.pt"]},"tensors":[]}`), 0o644)
			return setup{filepath.Join(base, "in.pt"), filepath.Join(base, "out.pt"), base}
		}, formats.TorchFile, "out.pt"},
		{"a user's file", func(t *testing.T, base string) setup {
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			os.WriteFile(filepath.Join(base, "out.pt"), []byte("my own checkpoint"), 0o644)
			return setup{filepath.Join(base, "in.pt"), filepath.Join(base, "out.pt"), base}
		}, formats.TorchFile, "no ckpt manifest beside it"},
		{"a file output onto a folder", func(t *testing.T, base string) setup {
			os.WriteFile(filepath.Join(base, "in.pt"), pt, 0o644)
			os.MkdirAll(filepath.Join(base, "out.pt"), 0o755)
			os.WriteFile(filepath.Join(base, "out.pt", "x"), []byte("x"), 0o644)
			return setup{filepath.Join(base, "in.pt"), filepath.Join(base, "out.pt"), base}
		}, formats.TorchFile, "folder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.make(t, t.TempDir())
			before := snapshot(t, s.root)
			_, err := convert.Run(t.Context(), convert.Options{Src: s.src, Dst: s.dst, Format: c.format, Force: true})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("convert --force: %v, want an error naming %q", err, c.want)
			}
			after := snapshot(t, s.root)
			if len(after) != len(before) {
				t.Fatalf("files changed: %d → %d", len(before), len(after))
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed or vanished", k)
				}
			}
		})
	}
}

// TestForceReplacesOwnOutput: an output ckpt wrote is replaced with --force, including by
// a conversion with a different file set (the older shards are gone afterwards).
func TestForceReplacesOwnOutput(t *testing.T) {
	src := "../testdata/hf/mistral_sharded"
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, MaxShardSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile}); !errors.Is(err, atomicfile.ErrExists) {
		t.Fatalf("without --force: %v", err)
	}
	if _, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, Force: true}); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(dst)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"ckpt-manifest.json", "config.json", "generation_config.json", "model.safetensors"}; !slices.Equal(names, want) {
		t.Errorf("after --force: %v, want %v", names, want)
	}
	// An empty folder is a destination without --force.
	empty := filepath.Join(t.TempDir(), "empty")
	os.Mkdir(empty, 0o755)
	if _, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: empty, Format: formats.DCPFolder}); err != nil {
		t.Errorf("into an empty folder: %v", err)
	}
}

// TestLinksStayInside: a folder's extra files that are links leading outside it are neither
// read nor copied; links inside the folder, and a hub cache snapshot's links into its
// blobs/, are followed (issue 14, item 2).
func TestLinksStayInside(t *testing.T) {
	base := t.TempDir()
	secret := filepath.Join(base, "elsewhere", "secret.txt")
	os.MkdirAll(filepath.Dir(secret), 0o755)
	os.WriteFile(secret, []byte("SECRET"), 0o600)

	// A plain folder.
	plain := filepath.Join(base, "plain")
	copyTree(t, "../testdata/hf/mistral_sharded", plain)
	os.Symlink(secret, filepath.Join(plain, "tokenizer_config.json"))
	os.Symlink("../elsewhere/secret.txt", filepath.Join(plain, "special_tokens_map.json"))
	os.Rename(filepath.Join(plain, "generation_config.json"), filepath.Join(plain, "gen.json"))
	os.Symlink("gen.json", filepath.Join(plain, "generation_config.json"))

	// A hub cache repository: snapshots/<rev>/ made of links into blobs/.
	repo := filepath.Join(base, "hub", "models--org--tiny")
	snap := filepath.Join(repo, "snapshots", "abc123")
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	entries, _ := os.ReadDir("../testdata/hf/mistral_sharded")
	for i, e := range entries {
		b, _ := os.ReadFile(filepath.Join("../testdata/hf/mistral_sharded", e.Name()))
		blob := filepath.Join(repo, "blobs", "blob"+string(rune('a'+i)))
		os.WriteFile(blob, b, 0o644)
		os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name()))
	}
	os.Symlink(secret, filepath.Join(snap, "tokenizer_config.json"))

	for _, c := range []struct {
		src        string
		want, left []string
	}{
		{plain, []string{"ckpt-manifest.json", "config.json", "gen.json", "generation_config.json", "model.safetensors"}, []string{"special_tokens_map.json", "tokenizer_config.json"}},
		{snap, []string{"ckpt-manifest.json", "config.json", "generation_config.json", "model.safetensors"}, []string{"tokenizer_config.json"}},
	} {
		dst := filepath.Join(t.TempDir(), "out")
		sum, err := convert.Run(t.Context(), convert.Options{Src: c.src, Dst: dst, Format: formats.SafetensorsFile})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		out, _ := os.ReadDir(dst)
		for _, e := range out {
			names = append(names, e.Name())
			if b, _ := os.ReadFile(filepath.Join(dst, e.Name())); strings.Contains(string(b), "SECRET") {
				t.Errorf("%s: the secret was copied into %s", c.src, e.Name())
			}
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("%s: output holds %v, want %v", c.src, names, c.want)
		}
		if w := strings.Join(sum.Messages(), "\n"); !strings.Contains(w, strings.Join(c.left, ", ")+": links leading outside") {
			t.Errorf("%s: warnings %q do not name %v", c.src, w, c.left)
		}
	}
}
