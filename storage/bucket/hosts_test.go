package bucket_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/bucket"
	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// join starts host's share of a 2-host output at url.
func join(ctx context.Context, url, run string, host int, resume, force bool) (storage.SharedOutput, error) {
	return storage.JoinOutput(ctx, url, storage.SharedOptions{
		OutputOptions: storage.OutputOptions{Folder: true, Force: force},
		Host:          host, Hosts: 2, Run: run, Resume: resume, Wait: 300 * time.Millisecond,
	})
}

// upload writes name whole through out.
func upload(t *testing.T, out storage.Output, name, data string) {
	t.Helper()
	w, err := out.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedOutput walks the protocol of a 2-host output: both hosts join an empty
// prefix at once (one marker); host 1 "killed" after one upload (no Abort, as SIGKILL)
// keeps that file on a run with Resume and removes it without; both seal; host 0 commits
// and only the files and the manifest remain. A part another run uploaded, a host of
// another run, and a host other than 0 facing objects without --force are refused.
func TestSharedOutput(t *testing.T) {
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		url := scheme + "://ckpt/shared/out"
		var outs [2]storage.SharedOutput
		var errs [2]error
		var wg sync.WaitGroup
		for h := range 2 {
			wg.Go(func() { outs[h], errs[h] = join(ctx, url, "run1", h, false, false) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("%s: joining at once: %v", scheme, errs)
		}
		if got := keys(t, scheme, "shared/out/"); !slices.Equal(got, []string{"shared/out/" + bucket.PartialMarker}) {
			t.Fatalf("%s: after joining: %v", scheme, got)
		}
		// Host 1 killed after one upload, another started.
		upload(t, outs[1], "b.bin", "host 1's bytes")
		if _, err := outs[1].Create("c.bin"); err != nil {
			t.Fatal(err)
		}
		// Another run's host refuses the prefix; with --force host 1 of it waits for its
		// host 0, in vain.
		if _, err := join(ctx, url, "run2", 1, false, false); !errors.Is(err, storage.ErrExists) {
			t.Errorf("%s: host 1 of another run: %v", scheme, err)
		}
		if _, err := join(ctx, url, "run2", 1, false, true); err == nil || !strings.Contains(err.Error(), "waited") {
			t.Errorf("%s: host 1 of another run with --force: %v", scheme, err)
		}
		again, err := join(ctx, url, "run1", 1, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if r := again.Resumed(); len(r) != 1 || r["b.bin"].Size != int64(len("host 1's bytes")) || len(r["b.bin"].XXHash64) != 16 {
			t.Errorf("%s: resumed %v", scheme, r)
		}
		again.Abort() // unsealed: removes what it kept
		if got := keys(t, scheme, "shared/out/"); !slices.Equal(got, []string{"shared/out/" + bucket.PartialMarker}) {
			t.Fatalf("%s: after an unsealed host's Abort: %v", scheme, got)
		}
		h1, err := join(ctx, url, "run1", 1, false, false)
		if err != nil || h1.CleanedUp() || h1.Resumed() != nil {
			t.Fatalf("%s: host 1 again: %v", scheme, err)
		}
		upload(t, h1, "b.bin", "host 1's bytes")
		if err := h1.Seal([]byte("part 1")); err != nil {
			t.Fatal(err)
		}
		h1.Abort() // sealed: keeps its share
		upload(t, outs[0], "a.bin", "host 0's bytes")
		if err := outs[0].Seal([]byte("part 0")); err != nil {
			t.Fatal(err)
		}
		parts, err := outs[0].Parts()
		if err != nil || string(parts[0]) != "part 0" || string(parts[1]) != "part 1" {
			t.Fatalf("%s: parts %q %v", scheme, parts, err)
		}
		// A part that is not this run's is refused. (Removed first: gofakes3 keeps an
		// object's metadata when it is overwritten, which S3 does not.)
		b, _ := bucket.Default.Bucket(ctx, bucket.Location{Scheme: scheme, Bucket: "ckpt"})
		b.Delete(ctx, "shared/out/.ckpt-host-1.part")
		putObject(t, scheme, "shared/out/.ckpt-host-1.part", "forged")
		if _, err := outs[0].Parts(); !errors.Is(err, storage.ErrForeign) {
			t.Errorf("%s: a forged part: %v", scheme, err)
		}
		if err := outs[0].Commit(nil); !errors.Is(err, storage.ErrForeign) {
			t.Errorf("%s: commit beside a forged part: %v", scheme, err)
		}
		h1, err = join(ctx, url, "run1", 1, false, false)
		if !errors.Is(err, storage.ErrForeign) {
			t.Errorf("%s: host 1 beside a forged part: %v", scheme, err)
		}
		b.Delete(ctx, "shared/out/.ckpt-host-1.part")
		h1, err = join(ctx, url, "run1", 1, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := h1.Seal([]byte("part 1")); err != nil {
			t.Fatal(err)
		}
		if err := outs[0].Commit([]storage.NamedBytes{{Name: "manifest.json", Data: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
		if got := keys(t, scheme, "shared/out/"); !slices.Equal(got, []string{"shared/out/a.bin", "shared/out/b.bin", "shared/out/manifest.json"}) {
			t.Fatalf("%s: after commit: %v", scheme, got)
		}
		// A host other than 0 facing a finished output without --force is refused at once.
		if _, err := join(ctx, url, "run3", 1, false, false); !errors.Is(err, storage.ErrExists) {
			t.Errorf("%s: host 1 beside a finished output: %v", scheme, err)
		}
	}
}

// TestSharedOutputOneHost walks a single process's output (host 0 of 1): killed after
// one upload (no Abort, as SIGKILL), a plain rerun and a resume of another run are refused
// and touch nothing; a resume keeps the finished file and commits with no part; a run
// killed after uploading its manifest leaves it removed first by the next run; Abort
// leaves nothing, marker included; --force replaces another run's leftovers.
func TestSharedOutputOneHost(t *testing.T) {
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	one := func(url, run string, resume, force bool) (storage.SharedOutput, error) {
		return storage.JoinOutput(ctx, url, storage.SharedOptions{
			OutputOptions: storage.OutputOptions{Folder: true, Force: force, Manifest: "manifest.json"},
			Host:          0, Hosts: 1, Run: run, Resume: resume,
		})
	}
	for _, scheme := range []string{"gs", "s3"} {
		url := scheme + "://ckpt/one/out"
		out, err := one(url, "run1", false, false)
		if err != nil {
			t.Fatal(err)
		}
		upload(t, out, "a.bin", "finished")
		if _, err := out.Create("b.bin"); err != nil {
			t.Fatal(err)
		}
		killed := keys(t, scheme, "one/out/")
		for _, c := range []struct {
			run    string
			resume bool
			msg    string
		}{{"run1", false, "resuming it keeps"}, {"run2", true, "differ"}, {"run2", false, "another conversion"}} {
			if _, err := one(url, c.run, c.resume, false); !errors.Is(err, storage.ErrExists) || !strings.Contains(err.Error(), c.msg) || errors.Is(err, multihost.ErrUnfinished) != (c.run == "run1") {
				t.Errorf("%s: %s (resume %v) beside a killed run: %v", scheme, c.run, c.resume, err)
			}
		}
		if got := keys(t, scheme, "one/out/"); !slices.Equal(got, killed) {
			t.Fatalf("%s: a refused run changed %v to %v", scheme, killed, got)
		}
		again, err := one(url, "run1", true, false)
		if err != nil {
			t.Fatal(err)
		}
		if r := again.Resumed(); len(r) != 1 || r["a.bin"].Size != int64(len("finished")) {
			t.Fatalf("%s: resumed %v", scheme, r)
		}
		upload(t, again, "b.bin", "second")
		// Killed in Commit, after the manifest: the next run removes it first.
		putObjectRun(t, scheme, "one/out/manifest.json", "{}", "run1")
		again2, err := one(url, "run1", true, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(t, scheme, "one/out/"); slices.Contains(got, "one/out/manifest.json") {
			t.Fatalf("%s: the killed run's manifest stays: %v", scheme, got)
		}
		if err := again2.Commit([]storage.NamedBytes{{Name: "manifest.json", Data: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
		if got := keys(t, scheme, "one/out/"); !slices.Equal(got, []string{"one/out/a.bin", "one/out/b.bin", "one/out/manifest.json"}) {
			t.Fatalf("%s: after commit: %v", scheme, got)
		}
		// Aborted: nothing is left, the marker included.
		url = scheme + "://ckpt/one/aborted"
		out, err = one(url, "run1", true, false) // nothing to resume
		if err != nil || out.Resumed() == nil || len(out.Resumed()) != 0 {
			t.Fatalf("%s: resume of nothing: %v %v", scheme, out, err)
		}
		upload(t, out, "a.bin", "x")
		out.Abort()
		if got := keys(t, scheme, "one/aborted/"); len(got) != 0 {
			t.Fatalf("%s: an aborted output left %v", scheme, got)
		}
		// --force replaces another run's leftovers.
		out, _ = one(url, "run1", false, false)
		upload(t, out, "a.bin", "x")
		out, err = one(url, "run2", false, true)
		if err != nil || out.CleanedUp() {
			t.Fatalf("%s: --force over another run: %v", scheme, err)
		}
		if got := keys(t, scheme, "one/aborted/"); !slices.Equal(got, []string{"one/aborted/" + bucket.PartialMarker}) {
			t.Fatalf("%s: after --force: %v", scheme, got)
		}
		out.Abort()
	}
}

// putObjectRun writes the object key carrying run, as an output of that run uploads it.
func putObjectRun(t *testing.T, scheme, key, data, run string) {
	t.Helper()
	b, err := bucket.Default.Bucket(context.Background(), bucket.Location{Scheme: scheme, Bucket: "ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(context.Background(), key, []byte(data), bucket.PutOptions{Metadata: map[string]string{bucket.RunMetadata: run}}); err != nil {
		t.Fatal(err)
	}
}
