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
