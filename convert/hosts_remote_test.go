package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/bucket"
	"github.com/ckpt-dev/ckpt/verify"
)

// openBucket opens the bucket of the object (or prefix) url and returns its key there.
func openBucket(t *testing.T, url string) (*bucket.Bucket, string) {
	t.Helper()
	l, err := bucket.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bucket.Default.Bucket(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	return b, l.Key
}

// putForeign uploads data to the object url as anyone but ckpt would (no run metadata).
func putForeign(t *testing.T, url, data string) {
	t.Helper()
	b, key := openBucket(t, url)
	if err := b.Put(context.Background(), key, []byte(data), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// objectNames lists the names under the prefix url.
func objectNames(t *testing.T, url string) []string {
	t.Helper()
	b, key := openBucket(t, url)
	objs, err := b.List(context.Background(), key+"/", "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, key+"/"))
	}
	return out
}

// sameFiles compares every file of want (a local output) with got, manifests aside, and
// checks that they hold the same names.
func sameFiles(t *testing.T, what, want, got string) {
	t.Helper()
	if a, b := fileNames(want), fileNames(got); !slices.Equal(a, b) || len(a) < 3 {
		t.Fatalf("%s: files %v, want %v", what, b, a)
	}
	for _, n := range fileNames(want) {
		if n == manifest.Name {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(want, n))
		b, _ := os.ReadFile(filepath.Join(got, n))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %s differs", what, n)
		}
	}
	ma, err := manifest.Read(context.Background(), filepath.Join(want, manifest.Name))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := manifest.Read(context.Background(), filepath.Join(got, manifest.Name))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if fmt.Sprint(ma.Tensors) != fmt.Sprint(mb.Tensors) {
		t.Errorf("%s: the manifests' tensors differ", what)
	}
}

// TestMultiHostBucket runs the 4 hosts of a per-device conversion at once into a GCS and
// an S3 prefix, for DCP and per-device safetensors: the objects are exactly the files of
// the single-process and the shared-folder multi-host outputs (manifests aside: they
// record when), the output passes ckpt check, and no control object or marker is left.
// Run again once complete, a host has nothing to do.
func TestMultiHostBucket(t *testing.T) {
	buckettest.Start(t, "ckpt")
	f := newHostsFixture(t, "cpu", "tp=2,fsdp=4")
	dir := f.dir
	for _, format := range []formats.Layout{formats.DCPFolder, formats.SafetensorsFile} {
		options := f.options(format, time.Minute)
		single := f.single(t, string(format)+"-single", options)
		shared := filepath.Join(dir, string(format)+"-shared")
		runHosts(t, func(h int) Options { return options(shared, h, 4) })
		for _, scheme := range []string{"gs", "s3"} {
			dst := scheme + "://ckpt/multi/" + string(format)
			sums := runHosts(t, func(h int) Options { return options(dst, h, 4) })
			for h, s := range sums {
				if !s.Host.Sealed || s.Host.Finished != (h == 0) || s.Host.Run != sums[0].Host.Run {
					t.Errorf("%s host %d: %+v", dst, h, s.Host)
				}
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Fatalf("check %s: %v %+v", dst, err, rep)
			}
			for _, n := range objectNames(t, dst) {
				if strings.HasPrefix(n, ".ckpt") {
					t.Errorf("%s: %s left", dst, n)
				}
			}
			got := filepath.Join(dir, scheme+"-"+string(format))
			if _, err := buckettest.GetTree(context.Background(), dst, got); err != nil {
				t.Fatal(err)
			}
			sameFiles(t, dst+" against one process", single, got)
			sameFiles(t, dst+" against a shared folder", shared, got)
			sum, err := Run(context.Background(), options(dst, 3, 4))
			if err != nil || !sum.Host.AlreadyDone {
				t.Fatalf("host 3 again: %v %+v", err, sum)
			}
		}
	}
}

// runHosts runs the hosts of a multi-host conversion at once and returns their summaries.
func runHosts(t *testing.T, opts func(host int) Options) []*Summary {
	t.Helper()
	sums := make([]*Summary, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for h := range 4 {
		wg.Go(func() { sums[h], errs[h] = Run(context.Background(), opts(h)) })
	}
	wg.Wait()
	for h, err := range errs {
		if err != nil {
			t.Errorf("host %d: %v", h, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return sums
}

// TestMultiHostBucketShares: hosts run one after another into a bucket prefix; until host
// 0 finishes, nothing passes ckpt check. A host cancelled midway removes what it wrote; run
// again with Resume it keeps what an interrupted run finished. An object someone else puts
// in the prefix is refused by host 0, with or without --force, and never removed; a
// conversion with other options does not adopt the shares of this one.
func TestMultiHostBucketShares(t *testing.T) {
	buckettest.Start(t, "ckpt")
	f := newHostsFixture(t, "cpu", "fsdp=8")
	dir, options := f.dir, f.options(formats.DCPFolder, 2*time.Second)
	single := f.single(t, "single", options)
	for _, scheme := range []string{"gs", "s3"} {
		dst := scheme + "://ckpt/shares"
		// Host 1 cancelled after its first file: what it wrote goes.
		ctx, cancel := context.WithCancel(context.Background())
		o := options(dst, 1, 2)
		o.Progress = func(done, total int64) {
			if done > total/2 {
				cancel()
			}
		}
		if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
			t.Fatalf("host 1 cancelled: %v", err)
		}
		cancel()
		if names := objectNames(t, dst); !slices.Equal(names, []string{bucket.PartialMarker}) {
			t.Fatalf("host 1 cancelled left %v", names)
		}
		// Host 1 finishes; host 0 is still to run.
		if sum, err := Run(context.Background(), options(dst, 1, 2)); err != nil || !sum.Host.Sealed {
			t.Fatalf("host 1: %v", err)
		}
		if _, err := verify.Check(context.Background(), dst, ""); err == nil {
			t.Fatal("ckpt check passes a half-finished output")
		}
		// Host 0 of another conversion (float16 moments): its run differs, so it refuses
		// the prefix holding this one's shares, with or without --force.
		other := options(dst, 0, 2)
		other.Plan.OptimizerDType = statedict.Float16
		if _, err := Run(context.Background(), other); !errors.Is(err, storage.ErrExists) {
			t.Fatalf("host 0 of another conversion: %v", err)
		}
		// A foreign object in the prefix: host 0 refuses to finish, and leaves it.
		putForeign(t, dst+"/notes.txt", "mine")
		for _, force := range []bool{false, true} {
			o := options(dst, 0, 2)
			o.Force = force
			if _, err := Run(context.Background(), o); !errors.Is(err, storage.ErrForeign) || !strings.Contains(err.Error(), "notes.txt") {
				t.Fatalf("host 0 (force %v) beside a foreign object: %v", force, err)
			}
		}
		if !slices.Contains(objectNames(t, dst), "notes.txt") {
			t.Fatal("the foreign object was removed")
		}
		l, _ := bucket.Parse(dst + "/notes.txt")
		b, _ := bucket.Default.Bucket(context.Background(), l)
		if err := b.Delete(context.Background(), l.Key); err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), options(dst, 0, 2))
		if err != nil || !sum.Host.Finished {
			t.Fatalf("host 0: %v", err)
		}
		got := filepath.Join(dir, scheme)
		if _, err := buckettest.GetTree(context.Background(), dst, got); err != nil {
			t.Fatal(err)
		}
		sameFiles(t, dst, single, got)
		// A foreign object beside a finished output: --force refuses to replace it.
		putForeign(t, dst+"/notes.txt", "mine")
		o = options(dst, 0, 2)
		o.Force, o.Plan.OptimizerDType = true, statedict.Float16
		if _, err := Run(context.Background(), o); !errors.Is(err, storage.ErrForeign) {
			t.Fatalf("--force beside a foreign object: %v", err)
		}
	}
}

// TestMultiHostBucketLoadsInTorch: the DCP output 2 hosts write at once into a GCS prefix
// for mesh tp=2,fsdp=2, downloaded, is what torch's ranks load with dcp.load, each reading
// only its own file, and what one process reassembles (check_sharded_dcp.py, as in
// TestShardedDCPLoadsInTorch).
func TestMultiHostBucketLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	buckettest.Start(t, "ckpt")
	host, chroot := oracle.TempDir(t)
	src := filepath.Join(host, "llama.pt")
	if _, err := o.Python("testdata/runtime/llama_adamw.py", chroot+"/llama.pt"); err != nil {
		t.Fatal(err)
	}
	const ms = "tp=2,fsdp=2"
	target, err := runtime.NewTarget(runtime.Spec{Device: "cpu", Mesh: ms})
	if err != nil {
		t.Fatal(err)
	}
	dst := "gs://ckpt/torch/out"
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for h := range 2 {
		wg.Go(func() {
			opts := DefaultOptions(src, dst)
			opts.Format, opts.Target = formats.DCPFolder, target
			opts.Hosts = Hosts{Index: h, Count: 2, Wait: time.Minute}
			_, errs[h] = Run(context.Background(), opts)
		})
	}
	wg.Wait()
	for h, err := range errs {
		if err != nil {
			t.Fatalf("host %d: %v", h, err)
		}
	}
	if _, err := buckettest.GetTree(context.Background(), dst, filepath.Join(host, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(host, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := o.Python("testdata/runtime/check_sharded_dcp.py", chroot+"/llama.pt", chroot+"/out", ms, chroot+"/work")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		OK            bool     `json:"ok"`
		Errors        []string `json:"errors"`
		Ranks         []json.RawMessage
		SingleProcess int `json:"single_process"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, e := range res.Errors {
		t.Error(e)
	}
	// 21 parameters with 3 optimizer tensors each, plus the param-group values.
	if len(res.Ranks) != target.Ranks() || res.SingleProcess < 21*4 || !res.OK {
		t.Fatalf("%d ranks checked, %d values reassembled: %s", len(res.Ranks), res.SingleProcess, out)
	}
}
