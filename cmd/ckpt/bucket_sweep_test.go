package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
)

// TestBucketSweep: every checkpoint fixture — torch.save zip and legacy files, HF folders,
// DCP directories, safetensors files, the quantized model folders, the ecosystem layouts
// (Lightning, fairseq, compiled and legacy objects; Trainer, PEFT, pipeline, Accelerate
// and kohya folders; DeepSpeed ZeRO, Megatron and NeMo) and the hostile files — behaves
// from a GCS bucket exactly as from local disk: `inspect --json --hash` prints the same
// (tensor hashes included), `convert --to tpu` writes the same bytes, and one that fails
// locally fails from the bucket too.
func TestBucketSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("converts every ecosystem fixture twice")
	}
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	tmp := t.TempDir()
	root := "../../testdata"
	var fixtures []string
	for _, family := range []string{"torch", "hf", "dcp", "safetensors", "quantized", "hostile",
		"ecosystem/objects", "ecosystem/folders", "ecosystem/zero", "ecosystem/megatron", "ecosystem/dcp"} {
		entries, err := os.ReadDir(filepath.Join(root, family))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".json", ".py", ".md": // expectations and their generators
			default:
				fixtures = append(fixtures, family+"/"+e.Name())
			}
		}
	}
	if len(fixtures) < 70 {
		t.Fatalf("%d fixtures: the sweep lost its inputs", len(fixtures))
	}
	for _, fx := range fixtures {
		t.Run(strings.ReplaceAll(fx, "/", "_"), func(t *testing.T) {
			local := filepath.Join(root, fx)
			src := "gs://ckpt/sweep/" + fx
			if err := buckettest.PutTree(ctx, local, src); err != nil {
				t.Fatal(err)
			}
			want, wantErr := run(t, "inspect", "--json", "--hash", local)
			got, gotErr := run(t, "inspect", "--json", "--hash", src)
			if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !sameJSON(want, got) {
				t.Errorf("inspect: from the bucket %v, locally %v\n%s\n%s", gotErr, wantErr, got, want)
			}
			out := "out"
			if st, err := os.Stat(local); err == nil && !st.IsDir() {
				out = "out" + filepath.Ext(fx)
				if out == "out.ckpt" || out == "out.nemo" {
					out = "out.pt"
				}
			}
			ref := filepath.Join(tmp, "local", fx)
			os.MkdirAll(ref, 0o755)
			_, wantErr = run(t, "convert", "--to", "tpu", local, filepath.Join(ref, out))
			r2l := filepath.Join(tmp, "gcs", fx)
			os.MkdirAll(r2l, 0o755)
			_, gotErr = run(t, "convert", "--to", "tpu", src, filepath.Join(r2l, out))
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("convert: from the bucket %v, locally %v", gotErr, wantErr)
			}
			if wantErr != nil {
				t.Logf("fails alike: %v", wantErr)
				return
			}
			sameTree(t, src+" → local", ref, r2l)
		})
	}
}

// TestBucketEveryCommand: every command that reads a checkpoint takes a gs:// source and
// prints (or writes) what it does for the local copy: inspect, plan, forward,
// convert, check, and verify — tensor by tensor and with --forward — between a bucket
// source and a local or bucket output.
func TestBucketEveryCommand(t *testing.T) {
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	tmp := t.TempDir()
	local := "../../testdata/hf/mistral_sharded"
	src := "gs://ckpt/every/mistral"
	if err := buckettest.PutTree(ctx, local, src); err != nil {
		t.Fatal(err)
	}
	same := func(what string, args ...string) {
		t.Helper()
		at := func(p string) []string {
			out := make([]string, len(args))
			for i, a := range args {
				out[i] = strings.ReplaceAll(a, "SRC", p)
			}
			return out
		}
		want, err := run(t, at(local)...)
		if err != nil {
			t.Fatalf("%s, local: %v", what, err)
		}
		got, err := run(t, at(src)...)
		if err != nil {
			t.Fatalf("%s from the bucket: %v", what, err)
		}
		if strings.HasPrefix(strings.TrimSpace(want), "{") || strings.HasPrefix(strings.TrimSpace(want), "[") {
			if !sameJSON(want, got) {
				t.Errorf("%s: from the bucket\n%s\nlocally\n%s", what, got, want)
			}
		} else if strings.ReplaceAll(got, src, local) != want {
			t.Errorf("%s: from the bucket\n%s\nlocally\n%s", what, got, want)
		}
	}
	same("inspect", "inspect", "--json", "--hash", "SRC")
	same("plan", "plan", "--json", "--topology", "v5e-4", "SRC")
	logits := func(model, name string) []byte {
		t.Helper()
		p := filepath.Join(tmp, name)
		if _, err := run(t, "forward", model, "--tokens", "1,2,3", "--out", p); err != nil {
			t.Fatalf("forward %s: %v", model, err)
		}
		b, _ := os.ReadFile(p)
		return b
	}
	if a, b := logits(local, "local.safetensors"), logits(src, "gcs.safetensors"); len(a) == 0 || string(a) != string(b) {
		t.Errorf("forward: logits from the bucket (%d bytes) differ from the local ones (%d bytes)", len(b), len(a))
	}
	out := filepath.Join(tmp, "out")
	if _, err := run(t, "convert", "--to", "tpu", "--dtype", "bfloat16", src, out); err != nil {
		t.Fatal(err)
	}
	dst := "gs://ckpt/every/out"
	if _, err := run(t, "convert", "--to", "tpu", "--dtype", "bfloat16", src, dst); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", out}, {"check", dst},
		{"verify", src, out}, {"verify", src, dst}, {"verify", local, dst},
		{"verify", "--forward", src, dst},
	} {
		if got, err := run(t, args...); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, got)
		}
	}
}
