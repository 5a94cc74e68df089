package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// bucketFamilies are the held-in fixture families and the output each converts to.
var bucketFamilies = []struct{ src, out string }{
	{"torch/training_cuda.pt", "out.pt"},
	{"hf/mistral_sharded", "out"},
	{"dcp/sharded", "out"},
	{"ecosystem/folders/trainer/checkpoint-2", "out"},
	{"ecosystem/megatron/nemo1/tp2.nemo", "out"},
	{"ecosystem/megatron/nemo2", "out"},
}

// sameTree fails unless the files under got equal those under want byte for byte,
// manifests aside.
func sameTree(t *testing.T, what, want, got string) {
	t.Helper()
	files := func(root string) map[string][]byte {
		out := map[string][]byte{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "ckpt-manifest.json") {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out[rel], _ = os.ReadFile(p)
			return nil
		})
		return out
	}
	w, g := files(want), files(got)
	if len(w) == 0 || len(w) != len(g) {
		t.Errorf("%s: %d files, the local conversion wrote %d", what, len(g), len(w))
	}
	for name, b := range w {
		if !bytes.Equal(g[name], b) {
			t.Errorf("%s: %s differs from the local conversion's", what, name)
		}
	}
}

// TestBucketConversions: every fixture family in GCS and S3 inspects as it does locally
// and converts bucket → local (by either write path) and bucket → bucket to exactly the
// bytes a local conversion writes; `ckpt check` passes on the bucket output and no marker is left.
func TestBucketConversions(t *testing.T) {
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	tmp := t.TempDir()
	for i, fam := range bucketFamilies {
		local := filepath.Join("../../testdata", fam.src)
		ref := filepath.Join(tmp, "ref", fam.src)
		os.MkdirAll(ref, 0o755)
		if _, err := run(t, "convert", "--to", "tpu", local, filepath.Join(ref, fam.out)); err != nil {
			t.Fatalf("%s: local conversion: %v", fam.src, err)
		}
		wantInspect, err := run(t, "inspect", "--json", local)
		if err != nil {
			t.Fatal(err)
		}
		for _, scheme := range []string{"gs", "s3"} {
			src := scheme + "://ckpt/in/" + fam.src
			if err := buckettest.PutTree(ctx, local, src); err != nil {
				t.Fatal(err)
			}
			got, err := run(t, "inspect", "--json", src)
			if err != nil {
				t.Fatalf("inspect %s: %v", src, err)
			}
			if !sameJSON(wantInspect, got) {
				t.Errorf("inspect %s differs from the local inspection:\n%s\n%s", src, got, wantInspect)
			}
			// bucket → local, by the write path ckpt measures and through the page cache,
			// which writes the bytes the bucket stream lends in place
			for _, path := range []string{"", "off"} {
				t.Setenv("CKPT_DIRECT_IO", path)
				r2l := filepath.Join(tmp, scheme+"-local"+path, fam.src)
				os.MkdirAll(r2l, 0o755)
				if _, err := run(t, "convert", "--to", "tpu", src, filepath.Join(r2l, fam.out)); err != nil {
					t.Fatalf("convert %s → local (CKPT_DIRECT_IO=%s): %v", src, path, err)
				}
				sameTree(t, src+" → local (CKPT_DIRECT_IO="+path+")", ref, r2l)
			}
			// bucket → bucket
			dst := scheme + "://ckpt/out/" + string(rune('a'+i)) + "/" + fam.out
			if _, err := run(t, "convert", "--to", "tpu", src, dst); err != nil {
				t.Fatalf("convert %s → %s: %v", src, dst, err)
			}
			if out, err := run(t, "check", dst); err != nil {
				t.Errorf("check %s: %v\n%s", dst, err, out)
			}
			r2r := filepath.Join(tmp, scheme+"-bucket", fam.src)
			os.MkdirAll(r2r, 0o755)
			names, err := buckettest.GetTree(ctx, scheme+"://ckpt/out/"+string(rune('a'+i)), r2r)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasSuffix(n, bucket.PartialMarker) {
					t.Errorf("%s: the marker %s is left after the conversion", dst, n)
				}
			}
			sameTree(t, src+" → "+dst, ref, r2r)
			// Written by ckpt: --force replaces it; without, it is refused.
			if _, err := run(t, "convert", "--to", "tpu", src, dst); err == nil || !strings.Contains(err.Error(), "--force") {
				t.Errorf("converting again onto %s without --force: %v", dst, err)
			}
			if _, err := run(t, "convert", "--to", "tpu", "--force", src, dst); err != nil {
				t.Errorf("--force onto an earlier output: %v", err)
			}
		}
	}
}

// sameJSON compares two inspect --json outputs, their "path" aside.
func sameJSON(a, b string) bool {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	delete(x, "path")
	delete(y, "path")
	return reflect.DeepEqual(x, y)
}

// TestBucketFaults: with a fraction of range reads and uploads failing (503s and reset
// connections) or delayed, conversions bucket → bucket still complete byte-identical; an
// upload that keeps failing, and a cancelled conversion, fail cleanly and leave no object
// behind — nothing that `ckpt check` could take for an output.
func TestBucketFaults(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	ctx := context.Background()
	tmp := t.TempDir()
	fam := bucketFamilies[1] // the sharded HF folder: several objects, read and written
	local := filepath.Join("../../testdata", fam.src)
	ref := filepath.Join(tmp, "ref")
	if _, err := run(t, "convert", "--to", "tpu", local, ref); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		src := c.scheme + "://ckpt/in/" + fam.src
		if err := buckettest.PutTree(ctx, local, src); err != nil {
			t.Fatal(err)
		}
		anyRequest := func(r *http.Request) bool { return buckettest.Reads(r) || buckettest.Uploads(r) }
		c.srv.SetFaults(buckettest.Faults{Match: anyRequest, Fail: 0.15, Reset: 0.05, Delay: 0.1, DelayBy: 20 * time.Millisecond, Seed: 1})
		dst := c.scheme + "://ckpt/faults/flaky"
		if _, err := run(t, "convert", "--to", "tpu", src, dst); err != nil {
			t.Fatalf("%s: conversion under transient faults: %v", c.scheme, err)
		}
		if c.srv.Failed.Load() == 0 {
			t.Fatalf("%s: no fault was injected", c.scheme)
		}
		c.srv.SetFaults(buckettest.Faults{})
		got := filepath.Join(tmp, c.scheme+"-flaky")
		if _, err := buckettest.GetTree(ctx, dst, got); err != nil {
			t.Fatal(err)
		}
		sameTree(t, c.scheme+" under faults", ref, got)

		// From the fourth upload request on, every upload fails: the conversion fails and
		// removes the objects it had completed.
		var uploads atomic.Int64
		c.srv.SetFaults(buckettest.Faults{Match: func(r *http.Request) bool {
			return buckettest.Uploads(r) && uploads.Add(1) > 3
		}, Fail: 1, Seed: 2})
		broken := c.scheme + "://ckpt/faults/broken"
		if _, err := run(t, "convert", "--to", "tpu", src, broken); err == nil {
			t.Fatalf("%s: a conversion whose upload always fails succeeded", c.scheme)
		}
		c.srv.SetFaults(buckettest.Faults{})
		if names, err := buckettest.GetTree(ctx, broken, filepath.Join(tmp, c.scheme+"-broken")); err != nil || len(names) != 0 {
			t.Errorf("%s: a failed conversion left %v (%v)", c.scheme, names, err)
		}
		if _, err := run(t, "check", broken); err == nil {
			t.Errorf("%s: check passes on a failed conversion's destination", c.scheme)
		}

		// Cancelled halfway: nothing is left.
		cctx, cancel := context.WithCancel(ctx)
		opts := convert.DefaultOptions(src, c.scheme+"://ckpt/faults/cancelled")
		opts.Progress = func(done, total int64) {
			if done > total/2 {
				cancel()
			}
		}
		if _, err := convert.Run(cctx, opts); err == nil {
			t.Fatalf("%s: a cancelled conversion succeeded", c.scheme)
		}
		cancel()
		if names, err := buckettest.GetTree(ctx, c.scheme+"://ckpt/faults/cancelled", filepath.Join(tmp, c.scheme+"-cancelled")); err != nil || len(names) != 0 {
			t.Errorf("%s: a cancelled conversion left %v (%v)", c.scheme, names, err)
		}
	}
}

// patterned is storage bytes made up as they are read: bfloat16 values in [0.5, 2), a
// different run for each storage (seed), so a large checkpoint costs no memory to write.
type patterned struct{ seed int64 }

func (p patterned) ReadAt(b []byte, off int64) (int, error) {
	for i := range b {
		if (off+int64(i))%2 == 0 {
			b[i] = byte((off + int64(i)) / 2 * (p.seed*2 + 1))
		} else {
			b[i] = 0x3f
		}
	}
	return len(b), nil
}

// writeLlama writes a torch.save file shaped as scripts/bench/make_llama.py's (18 layers
// of attention and MLP weights between the embeddings and the head) at a quarter of its
// width: 123 MB, one layer 5.2% of it.
func writeLlama(t *testing.T, path string) {
	t.Helper()
	const h, inter, vocab, layers = 512, 1408, 4000, 18
	root := statedict.NewDict("collections.OrderedDict")
	var seed int64
	add := func(name string, shape ...int64) {
		n := int64(2)
		for _, d := range shape {
			n *= d
		}
		seed++
		st := statedict.NewReaderStorage(fmt.Sprint(seed), "cuda:0", statedict.BFloat16, patterned{seed}, 0, n)
		root.Append(name, &statedict.Tensor{Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st, DType: statedict.BFloat16})
	}
	add("model.embed_tokens.weight", vocab, h)
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, n := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
			add(p+"self_attn."+n+".weight", h, h)
		}
		add(p+"mlp.gate_proj.weight", inter, h)
		add(p+"mlp.up_proj.weight", inter, h)
		add(p+"mlp.down_proj.weight", h, inter)
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
	}
	add("model.norm.weight", h)
	add("lm_head.weight", vocab, h)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := torchzip.Write(f, root, torchzip.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBucketReadsWhatItNeeds counts the bytes the GCS emulator sends: converting one layer
// of a Llama-shaped checkpoint (dropping the rest) reads under 10% of the object, and the
// output equals the local conversion's; `ckpt scan` and `ckpt inspect` read the zip
// directory, local headers and pickles only — under 1%. The whole checkpoint, written
// through the page cache from the bytes the bucket lends, or uploaded from them to GCS and
// S3, equals the local conversion too.
func TestBucketReadsWhatItNeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and serves a 123 MB checkpoint")
	}
	gcs, _ := buckettest.Start(t, "ckpt")
	tmp := t.TempDir()
	local := filepath.Join(tmp, "llama.pt")
	writeLlama(t, local)
	st, err := os.Stat(local)
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	src := "gs://ckpt/llama/llama.pt"
	if err := buckettest.PutTree(context.Background(), local, src); err != nil {
		t.Fatal(err)
	}
	served := func(what string, most float64, args ...string) string {
		t.Helper()
		gcs.Served.Store(0)
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond) // prefetches in flight land
		got := gcs.Served.Load()
		t.Logf("%s: %d of %d bytes served (%.2f%%)", what, got, size, 100*float64(got)/float64(size))
		if float64(got) > most*float64(size) {
			t.Errorf("%s: the server sent %d bytes, %.2f%% of the %d-byte object (at most %.0f%%)", what, got, 100*float64(got)/float64(size), size, 100*most)
		}
		return out
	}
	drop := `^(lm_head|model\.(embed_tokens|norm|layers\.[1-9][0-9]*)\.)`
	want := filepath.Join(tmp, "want.safetensors")
	if _, err := run(t, "convert", "--to", "tpu", "--drop", drop, local, want); err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(tmp, "got.safetensors")
	served("one layer", 0.10, "convert", "--to", "tpu", "--drop", drop, src, got)
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(got)
	if len(a) < 5<<20 || !bytes.Equal(a, b) {
		t.Errorf("one layer from the bucket: %d bytes, differing from the local conversion's %d", len(b), len(a))
	}
	wantScan, _ := run(t, "scan", local)
	gotScan := served("scan", 0.01, "scan", src)
	if strings.ReplaceAll(gotScan, src, local) != wantScan {
		t.Errorf("scan of the object:\n%s\nlocal:\n%s", gotScan, wantScan)
	}
	wantInspect, _ := run(t, "inspect", "--json", local)
	gotInspect := served("inspect", 0.01, "inspect", "--json", src)
	if !sameJSON(wantInspect, gotInspect) {
		t.Errorf("inspect of the object differs from the local inspection")
	}
	// The whole checkpoint through the page cache, which writes the bytes the bucket's
	// streams lend in place, equals the local conversion.
	t.Setenv("CKPT_DIRECT_IO", "off")
	wantAll, gotAll := filepath.Join(tmp, "all-want.safetensors"), filepath.Join(tmp, "all-got.safetensors")
	if _, err := run(t, "convert", "--to", "tpu", local, wantAll); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "convert", "--to", "tpu", src, gotAll); err != nil {
		t.Fatal(err)
	}
	a, _ = os.ReadFile(wantAll)
	b, _ = os.ReadFile(gotAll)
	if len(a) < 100<<20 || !bytes.Equal(a, b) {
		t.Errorf("the whole checkpoint from the bucket through the page cache: %d bytes, differing from the local conversion's %d", len(b), len(a))
	}
	// And into a bucket, uploaded from the bytes the source's streams lend.
	for _, dst := range []string{"gs://ckpt/llama/all.safetensors", "s3://ckpt/llama/all.safetensors"} {
		if _, err := run(t, "convert", "--to", "tpu", src, dst); err != nil {
			t.Fatal(err)
		}
		got := filepath.Join(tmp, strings.ReplaceAll(dst, "/", "_"))
		if _, err := buckettest.GetTree(context.Background(), dst, got); err != nil {
			t.Fatal(err)
		}
		if b, _ = os.ReadFile(got); !bytes.Equal(a, b) {
			t.Errorf("the whole checkpoint from GCS to %s: %d bytes, differing from the local conversion's %d", dst, len(b), len(a))
		}
	}
}
