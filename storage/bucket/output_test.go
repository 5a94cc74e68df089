package bucket_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// keys lists every object under prefix in the bucket "ckpt" of scheme.
func keys(t *testing.T, scheme, prefix string) []string {
	t.Helper()
	b, err := bucket.Default.Bucket(context.Background(), bucket.Location{Scheme: scheme, Bucket: "ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.List(context.Background(), prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// putObject uploads data to key in the bucket "ckpt" of scheme, as anyone but ckpt would.
func putObject(t *testing.T, scheme, key, data string) {
	t.Helper()
	b, err := bucket.Default.Bucket(context.Background(), bucket.Location{Scheme: scheme, Bucket: "ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(context.Background(), key, []byte(data), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// crashed starts an output at url, completes one file in it and stops there, as a process
// killed mid-conversion would: its marker and that file stay.
func crashed(t *testing.T, url string, folder bool, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: folder})
	if err != nil {
		t.Fatal(err)
	}
	w, err := out.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "tensor bytes of an unfinished conversion")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestForceKeepsForeignBesideStaleMarker: --force over an unfinished output removes only
// the objects that output uploaded. An object someone else put beside its stale marker —
// in the folder, or at a file output's own name — makes it refuse the prefix and delete
// nothing; so does a marker naming no run. Without the foreign object the same --force
// succeeds and leaves only the new output.
func TestForceKeepsForeignBesideStaleMarker(t *testing.T) {
	servers(t)
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		cases := []struct {
			name    string
			folder  bool
			file    string // the unfinished output's file
			foreign string // key of the foreign object, relative to the bucket
			marker  string // marker text to put in place of the unfinished output's, if any
		}{
			{name: "folder", folder: true, file: "model-00001.safetensors", foreign: "force/folder/notes.txt"},
			{name: "folder/same-name", folder: true, file: "model.safetensors", foreign: "force/folder-same/model-00002.safetensors"},
			{name: "file", file: "", foreign: "force/file.pt"},
			{name: "legacy-marker", folder: true, file: "model.safetensors", marker: "ckpt output in progress\n"},
		}
		for _, c := range cases {
			t.Run(scheme+"/"+c.name, func(t *testing.T) {
				dir := map[string]string{"folder": "force/folder", "folder/same-name": "force/folder-same", "file": "force/file.pt", "legacy-marker": "force/legacy"}[c.name]
				url := scheme + "://ckpt/" + dir
				if c.name == "file" {
					// The file output's own object is someone else's, with a stale marker beside it.
					crashed(t, url, false, ".sidecar")
					putObject(t, scheme, dir, "someone else's checkpoint")
				} else {
					crashed(t, url, c.folder, c.file)
				}
				if c.marker != "" {
					marker := dir + "/" + bucket.PartialMarker
					putObject(t, scheme, marker, c.marker)
				}
				if c.foreign != "" && c.name != "file" {
					putObject(t, scheme, c.foreign, "someone else's notes")
				}
				before := keys(t, scheme, dir)
				_, err := storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: c.folder, Force: true})
				if !errors.Is(err, storage.ErrForeign) {
					t.Fatalf("--force beside a foreign object: %v, want ErrForeign; objects %v", err, before)
				}
				if want := c.foreign; want != "" && !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %s: %v", want, err)
				}
				t.Logf("refused: %v", err)
				if after := keys(t, scheme, dir); !slices.Equal(after, before) {
					t.Errorf("refused --force changed the prefix: %v, was %v", after, before)
				}
				if c.name == "file" || c.marker != "" {
					return
				}
				// The foreign object gone, --force removes the unfinished output's objects.
				b, _ := bucket.Default.Bucket(ctx, bucket.Location{Scheme: scheme, Bucket: "ckpt"})
				if err := b.Delete(ctx, c.foreign); err != nil {
					t.Fatal(err)
				}
				out, err := storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: c.folder, Force: true})
				if err != nil {
					t.Fatalf("--force over an unfinished output alone: %v", err)
				}
				if err := out.Commit(nil); err != nil {
					t.Fatal(err)
				}
				if left := keys(t, scheme, dir); len(left) != 0 {
					t.Errorf("after --force and an empty commit: %v", left)
				}
			})
		}
	}
}

// TestSecondOutputRefused: while one output is in progress (its marker there), a second
// at the same prefix without --force is refused; the first one's Abort then removes only
// what it uploaded, never an object another put at a name it had started.
func TestSecondOutputRefused(t *testing.T) {
	servers(t)
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		url := scheme + "://ckpt/second/out"
		first, err := storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: true}); !errors.Is(err, storage.ErrExists) {
			t.Errorf("%s: a second output beside an unfinished one: %v, want ErrExists", scheme, err)
		}
		w, err := first.Create("a.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "mine")
		w.Close()
		if _, err := first.Create("b.safetensors"); err != nil { // started, never finished
			t.Fatal(err)
		}
		putObject(t, scheme, "second/out/b.safetensors", "someone else's")
		first.Abort()
		if left := keys(t, scheme, "second/out/"); !slices.Equal(left, []string{"second/out/b.safetensors"}) {
			t.Errorf("%s: after Abort: %v, want only the foreign object", scheme, left)
		}
	}
}

// TestPersistentFailureReportedPromptly: against a server that fails every request of a
// kind, an open (reads) and an upload each fail after Retries tries of the failing request
// — one layer of retries, not the client's tries times ours — within about 5 s of backoff,
// on GCS and on S3 (whose parts in flight are tried Retries times each).
func TestPersistentFailureReportedPromptly(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	ctx := context.Background()
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		url := c.scheme + "://ckpt/persistent/object"
		putObject(t, c.scheme, "persistent/object", "some bytes")
		out, err := storage.CreateOutput(ctx, c.scheme+"://ckpt/persistent/out", storage.OutputOptions{Folder: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []struct {
			name  string
			match func(*http.Request) bool
			run   func() error
		}{
			{"open", nil, func() error {
				f, err := storage.Open(context.Background(), url)
				if err == nil {
					f.Close()
				}
				return err
			}},
			{"upload", buckettest.Uploads, func() error {
				w, err := out.Create("model.safetensors")
				if err != nil {
					return err
				}
				_, err = w.Write(make([]byte, bucket.UploadBuffer+1<<20))
				if cerr := w.Close(); err == nil {
					err = cerr
				}
				return err
			}},
		} {
			c.srv.SetFaults(buckettest.Faults{Match: op.match, Fail: 1, Seed: 1})
			before := c.srv.Failed.Load()
			start := time.Now()
			err := op.run()
			took := time.Since(start)
			tries := c.srv.Failed.Load() - before
			c.srv.SetFaults(buckettest.Faults{})
			if err == nil {
				t.Fatalf("%s %s: succeeded against a server failing every request", c.scheme, op.name)
			}
			t.Logf("%s %s: %d tries, %v: %v", c.scheme, op.name, tries, took.Round(time.Millisecond), err)
			most := int64(bucket.Retries)
			if c.scheme == "s3" && op.name == "upload" {
				most *= bucket.UploadParallel
			}
			if tries > most {
				t.Errorf("%s %s: the failing requests were tried %d times, more than %d: retries are layered", c.scheme, op.name, tries, most)
			}
			if took > 10*time.Second {
				t.Errorf("%s %s: the failure took %v to report", c.scheme, op.name, took)
			}
		}
		out.Abort()
	}
}

// TestUploadsReturnTheirBuffers: every way an S3 upload ends — aborted with a part half
// filled, failed by the server (multipart or a single PutObject), its context cancelled
// while it writes — returns the part buffers it took from the pool, so that a library user
// who aborts outputs over and over holds no memory for them.
func TestUploadsReturnTheirBuffers(t *testing.T) {
	_, s3 := buckettest.Start(t, "ckpt")
	// settled waits for the buffers in flight to come back to before.
	settled := func(before int64) int64 {
		deadline := time.Now().Add(5 * time.Second)
		for bucket.OutstandingBuffers() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return bucket.OutstandingBuffers()
	}
	big := make([]byte, 2*bucket.UploadPart+bucket.UploadPart/2) // two parts sent, one half filled
	for i, c := range []struct {
		name   string
		fail   bool // the server fails every upload request
		n      int  // bytes written
		close  bool // the file is closed before the abort
		cancel bool // the output's context is cancelled after writing
	}{
		{"aborted with a part half filled", false, len(big), false, false},
		{"multipart upload failing", true, len(big), true, false},
		{"multipart upload failing, not closed", true, len(big), false, false},
		{"small object failing", true, 1000, true, false},
		{"small object aborted", false, 1000, false, false},
		{"context cancelled while writing", false, len(big), false, true},
	} {
		before := settled(bucket.OutstandingBuffers())
		ctx, cancel := context.WithCancel(context.Background())
		out, err := storage.CreateOutput(ctx, "s3://ckpt/buffers/"+strconv.Itoa(i), storage.OutputOptions{Folder: true})
		if err != nil {
			t.Fatal(err)
		}
		if c.fail {
			s3.SetFaults(buckettest.Faults{Match: buckettest.Uploads, Fail: 1, Seed: 1})
		}
		w, err := out.Create("model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		w.Write(big[:c.n])
		if c.cancel {
			cancel()
			w.Write(big[:c.n])
		}
		if c.close {
			if err := w.Close(); err == nil {
				t.Errorf("%s: the upload succeeded", c.name)
			}
		}
		out.Abort()
		s3.SetFaults(buckettest.Faults{})
		cancel()
		if got := settled(before); got != before {
			t.Errorf("%s: %d pool buffers outstanding after the abort, %d before", c.name, got, before)
		}
	}
}

// TestCreateAfterEnd: a Create after the output was aborted (a signal, on another
// goroutine) or committed fails with an error, and uploads nothing.
func TestCreateAfterEnd(t *testing.T) {
	servers(t)
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		for _, end := range []string{"abort", "commit"} {
			prefix := "after-" + end + "/out"
			out, err := storage.CreateOutput(ctx, scheme+"://ckpt/"+prefix, storage.OutputOptions{Folder: true})
			if err != nil {
				t.Fatal(err)
			}
			if end == "abort" {
				out.Abort()
			} else if err := out.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if w, err := out.Create("late.safetensors"); err == nil {
				w.Close()
				t.Errorf("%s: Create after %s succeeded", scheme, end)
			}
			for _, k := range keys(t, scheme, prefix+"/") {
				if strings.HasSuffix(k, "late.safetensors") {
					t.Errorf("%s: Create after %s uploaded %s", scheme, end, k)
				}
			}
		}
	}
}

// TestNoCredentialsReportedAtOnce: with no credentials anywhere the AWS chain looks, an S3
// open fails at once with an error about credentials, having sent the server nothing —
// not after Retries tries of a search that cannot find more the second time.
func TestNoCredentialsReportedAtOnce(t *testing.T) {
	_, s3 := buckettest.Start(t, "ckpt")
	putObject(t, "s3", "creds/object", "some bytes")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	bucket.Default.Close() // the client made with the credentials
	before := s3.Requests.Load()
	start := time.Now()
	f, err := storage.Open(context.Background(), "s3://ckpt/creds/object")
	took := time.Since(start)
	if err == nil {
		f.Close()
		t.Fatal("opened an S3 object without credentials")
	}
	t.Logf("%v: %v", took.Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "credentials") {
		t.Errorf("the error does not say credentials are missing: %v", err)
	}
	if took > time.Second {
		t.Errorf("the failure took %v to report", took)
	}
	if n := s3.Requests.Load() - before; n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

// TestForeignRefusedFirst: a destination that Force would refuse too — objects no ckpt
// manifest lists, or one beside an unfinished output's marker it did not upload — is
// refused the first time as foreign, not as an earlier output Force would replace (issue
// 28, item 6), for a file, a folder and a single process's journaled folder (host 0 of 1,
// as convert writes every folder into a bucket); nothing there changes.
func TestForeignRefusedFirst(t *testing.T) {
	servers(t)
	ctx := context.Background()
	for _, scheme := range []string{"gs", "s3"} {
		for _, c := range []struct {
			name   string
			folder bool
			join   bool
			stale  bool // an unfinished output's marker and file lie there too
		}{
			{name: "file"},
			{name: "folder", folder: true},
			{name: "joined", folder: true, join: true},
			{name: "stale-folder", folder: true, stale: true},
			{name: "stale-joined", folder: true, join: true, stale: true},
		} {
			t.Run(scheme+"/"+c.name, func(t *testing.T) {
				dir := "first/" + c.name
				url := scheme + "://ckpt/" + dir
				foreign := dir + "/notes.txt"
				if !c.folder {
					foreign = dir
				}
				if c.stale {
					crashed(t, url, true, "model.safetensors")
				}
				putObject(t, scheme, foreign, "someone else's")
				before := keys(t, scheme, dir)
				var err error
				if c.join {
					_, err = storage.JoinOutput(ctx, url, storage.SharedOptions{OutputOptions: storage.OutputOptions{Folder: true}, Host: 0, Hosts: 1, Run: "r1"})
				} else {
					_, err = storage.CreateOutput(ctx, url, storage.OutputOptions{Folder: c.folder})
				}
				if !errors.Is(err, storage.ErrForeign) || errors.Is(err, storage.ErrExists) {
					t.Fatalf("without Force: %v, want ErrForeign alone", err)
				}
				if !strings.Contains(err.Error(), foreign) && !strings.Contains(err.Error(), "no ckpt manifest") {
					t.Errorf("the error does not say why: %v", err)
				}
				if after := keys(t, scheme, dir); !slices.Equal(after, before) {
					t.Errorf("the prefix changed: %v, was %v", after, before)
				}
			})
		}
	}
}
