package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/fifotest"
)

// copyDir copies the tree src into dst (files only, links followed).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestControlFilesBounded: every small control file ckpt reads — DeepSpeed's latest,
// Megatron's tracker, config.json, an index, trainer_state.json, a hub-cache ref, a
// manifest, DCP's .metadata, --optimizer-names, --config, --plan, --prompt-ids — replaced
// by a FIFO, a link to /dev/zero, a link to a secret or a file far past its bound, makes
// the command fail promptly (never wait, never read without bound) and never print what a
// file it refused holds (issue 29, class 3).
func TestControlFilesBounded(t *testing.T) {
	const secret = "SECRET-TOKEN-hf_abcdefghijklmnopqrstuvwxyz0123456789"
	type setup struct {
		args    []string
		control string // the file replaced
	}
	eco := "../../testdata/ecosystem/"
	cases := []struct {
		name string
		make func(t *testing.T, dir string) setup
	}{
		{"DeepSpeed latest", func(t *testing.T, dir string) setup {
			copyDir(t, eco+"zero/zero2", filepath.Join(dir, "ck"))
			return setup{[]string{"inspect", filepath.Join(dir, "ck")}, filepath.Join(dir, "ck", "latest")}
		}},
		{"Megatron tracker", func(t *testing.T, dir string) setup {
			copyDir(t, eco+"megatron/legacy", filepath.Join(dir, "ck"))
			return setup{[]string{"inspect", filepath.Join(dir, "ck")}, filepath.Join(dir, "ck", "latest_checkpointed_iteration.txt")}
		}},
		{"config.json", func(t *testing.T, dir string) setup {
			copyDir(t, "../../testdata/hf/mistral_sharded", filepath.Join(dir, "ck"))
			return setup{[]string{"convert", filepath.Join(dir, "ck"), filepath.Join(dir, "out")}, filepath.Join(dir, "ck", "config.json")}
		}},
		{"index", func(t *testing.T, dir string) setup {
			copyDir(t, "../../testdata/hf/mistral_sharded", filepath.Join(dir, "ck"))
			return setup{[]string{"inspect", filepath.Join(dir, "ck")}, filepath.Join(dir, "ck", "model.safetensors.index.json")}
		}},
		{"trainer_state.json", func(t *testing.T, dir string) setup {
			copyDir(t, eco+"folders/trainer/checkpoint-2", filepath.Join(dir, "ck"))
			return setup{[]string{"convert", "--format", "safetensors", filepath.Join(dir, "ck"), filepath.Join(dir, "out")}, filepath.Join(dir, "ck", "trainer_state.json")}
		}},
		{"hub-cache ref", func(t *testing.T, dir string) setup {
			cache := hubCache(t, "../../testdata/hf/mistral_sharded", "org", "tiny", strings.Repeat("0123456789", 4), "v1")
			t.Setenv("HF_HUB_CACHE", cache)
			return setup{[]string{"inspect", "org/tiny"}, filepath.Join(cache, "models--org--tiny", "refs", "main")}
		}},
		{"manifest", func(t *testing.T, dir string) setup {
			if _, err := run(t, "convert", "../../testdata/hf/mistral_sharded", filepath.Join(dir, "out")); err != nil {
				t.Fatal(err)
			}
			return setup{[]string{"check", filepath.Join(dir, "out")}, filepath.Join(dir, "out", "ckpt-manifest.json")}
		}},
		{"manifest, convert --force", func(t *testing.T, dir string) setup {
			if _, err := run(t, "convert", "../../testdata/hf/mistral_sharded", filepath.Join(dir, "out")); err != nil {
				t.Fatal(err)
			}
			return setup{[]string{"convert", "--force", "../../testdata/hf/mistral_sharded", filepath.Join(dir, "out")}, filepath.Join(dir, "out", "ckpt-manifest.json")}
		}},
		{"DCP .metadata", func(t *testing.T, dir string) setup {
			copyDir(t, "../../testdata/dcp/model", filepath.Join(dir, "ck"))
			return setup{[]string{"inspect", filepath.Join(dir, "ck")}, filepath.Join(dir, "ck", ".metadata")}
		}},
		{"--optimizer-names", func(t *testing.T, dir string) setup {
			return setup{[]string{"inspect", "--optimizer-names", filepath.Join(dir, "names.txt"), "../../testdata/torch/training_cuda.pt"}, filepath.Join(dir, "names.txt")}
		}},
		{"--config", func(t *testing.T, dir string) setup {
			return setup{[]string{"forward", "--config", filepath.Join(dir, "config.json"), "--tokens", "1,2", "../../testdata/hf/mistral_sharded"}, filepath.Join(dir, "config.json")}
		}},
		{"--plan", func(t *testing.T, dir string) setup {
			return setup{[]string{"plan", "--mesh", "fsdp=2", "--plan", filepath.Join(dir, "plan.json"), "../../testdata/hf/mistral_sharded"}, filepath.Join(dir, "plan.json")}
		}},
		{"--prompt-ids", func(t *testing.T, dir string) setup {
			return setup{[]string{"verify", "--forward", "--prompt-ids", filepath.Join(dir, "ids.txt"), "../../testdata/hf/mistral_sharded", "../../testdata/hf/mistral_sharded"}, filepath.Join(dir, "ids.txt")}
		}},
	}
	kinds := []struct {
		name string
		make func(t *testing.T, dir, p string)
	}{
		{"FIFO", func(t *testing.T, dir, p string) {
			fifotest.Make(t, p)
		}},
		{"link to /dev/zero", func(t *testing.T, dir, p string) { must(t, os.Symlink("/dev/zero", p)) }},
		{"link to a secret", func(t *testing.T, dir, p string) {
			s := filepath.Join(dir, "secret.txt")
			must(t, os.WriteFile(s, []byte(secret+"\n"), 0o600))
			must(t, os.Symlink(s, p))
		}},
		{"a file far past its bound", func(t *testing.T, dir, p string) {
			f, err := os.Create(p)
			must(t, err)
			must(t, f.Truncate(1<<40)) // sparse: a TiB that reads as zeros
			f.Close()
		}},
	}
	for _, c := range cases {
		for _, k := range kinds {
			t.Run(c.name+"/"+k.name, func(t *testing.T) {
				dir := t.TempDir()
				s := c.make(t, dir)
				os.Remove(s.control)
				k.make(t, dir, s.control)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := ckptCmd(s.args...)
				cmd.Env = append(cmd.Env, "HF_HUB_CACHE="+os.Getenv("HF_HUB_CACHE"))
				start := time.Now()
				done := make(chan struct{})
				var out []byte
				var err error
				go func() { out, err = cmd.CombinedOutput(); close(done) }()
				select {
				case <-done:
				case <-ctx.Done():
					cmd.Process.Kill()
					<-done
					t.Fatalf("ckpt %v hung on %s", s.args, k.name)
				}
				if strings.Contains(string(out), "SECRET-TOKEN") {
					t.Errorf("ckpt %v printed the secret:\n%s", s.args, out)
				}
				// A file carried beside the weights may be left out instead, said so.
				if err == nil && !strings.Contains(string(out), "left out "+filepath.Base(s.control)) {
					t.Errorf("ckpt %v succeeded with %s as %s, without saying it was left out:\n%s", s.args, k.name, filepath.Base(s.control), out)
				}
				if d := time.Since(start); d > 30*time.Second {
					t.Errorf("ckpt %v took %v", s.args, d)
				}
			})
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
