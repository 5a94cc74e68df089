package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// uploadCounter counts, by object name, the requests that start an upload to a server:
// a GCS upload's first request (its name in the query or, for a multipart upload, in the
// metadata part of the body), an S3 PutObject or CreateMultipartUpload (the name in the
// path). It injects no fault.
type uploadCounter struct {
	mu     sync.Mutex
	starts map[string]int
}

func (c *uploadCounter) match(r *http.Request) bool {
	name := ""
	switch {
	case strings.Contains(r.URL.Path, "/upload/storage/v1/b/") && r.Method == http.MethodPost:
		name = r.URL.Query().Get("name")
		if name == "" && r.Body != nil {
			// The object's metadata leads a multipart upload's body: peek at it, then
			// give the handler the body whole.
			head := make([]byte, 4096)
			n, _ := io.ReadFull(r.Body, head)
			head = head[:n]
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
			if m := regexp.MustCompile(`"name":\s*"([^"]*)"`).FindSubmatch(head); m != nil {
				name = string(m[1])
			}
		}
	case r.Method == http.MethodPut && r.URL.Query().Get("uploadId") == "",
		r.Method == http.MethodPost && r.URL.Query().Has("uploads"):
		name = strings.TrimPrefix(r.URL.Path, "/ckpt/") // path-style: /bucket/key
	}
	if name != "" {
		c.mu.Lock()
		c.starts[path.Base(name)]++
		c.mu.Unlock()
	}
	return false
}

func (c *uploadCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.starts
	c.starts = map[string]int{}
	return old
}

// TestBucketKillResume kills a single-process conversion of a sharded HF folder into a
// GCS and an S3 prefix with SIGKILL after some of its files are uploaded: nothing there
// passes ckpt check; a rerun without --resume, and a resume with other options (the run
// differs), are refused and leave every object as it was; --resume keeps the objects the
// killed run finished (no upload of them starts again), uploads the rest and the manifest,
// and the objects are exactly the files an uninterrupted conversion writes. A single-file
// output killed midway left nothing to resume: --resume says so; with nothing there,
// --resume converts as a plain run does.
func TestBucketKillResume(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	bigSource(t, src, 24, 1<<19) // 24 tensors of 2 MiB: 24 shards of 1 MiB bfloat16
	args := func(dst string, extra ...string) []string {
		return append([]string{"convert", "--to", "tpu", "--format", "safetensors", "--dtype", "bfloat16", "--max-shard-size", "1MiB", src, dst}, extra...)
	}
	ref := filepath.Join(dir, "ref")
	if out, err := ckptCmd(args(ref)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted: %v\n%s", err, out)
	}
	want := treeHashes(t, ref)
	if len(want) < 24 {
		t.Fatalf("only %d files", len(want))
	}
	finished := regexp.MustCompile(`"size":[0-9]`)
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		t.Run(c.scheme, func(t *testing.T) {
			uploads := &uploadCounter{starts: map[string]int{}}
			c.srv.SetFaults(buckettest.Faults{Match: uploads.match})
			defer c.srv.SetFaults(buckettest.Faults{})
			dst := c.scheme + "://ckpt/resume/out"
			l, _ := bucket.Parse(dst)
			b, err := bucket.Default.Bucket(context.Background(), l)
			if err != nil {
				t.Fatal(err)
			}
			journalKey := l.Key + "/.ckpt-host-0.journal"
			cmd := ckptCmd(args(dst)...)
			var out0 bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out0, &out0
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				j, _ := b.ReadAll(context.Background(), journalKey, 1<<20)
				if len(finished.FindAll(j, -1)) >= 5 {
					killed = cmd.Process.Signal(syscall.SIGKILL) == nil
					break
				}
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !killed || !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the conversion was not killed midway: %v\n%s", err, out0.String())
			}
			// The killed run's requests already sent are handled to their end before the
			// bucket is looked at: what they store is the killed run's, not a refused run's.
			if !c.srv.Settle(200*time.Millisecond, 10*time.Second) {
				t.Fatal("the emulator kept handling requests 10 s after the kill")
			}
			if out, err := run(t, "check", dst); err == nil {
				t.Fatalf("check passes a killed run's output:\n%s", out)
			}
			// What the killed run finished, by its journal.
			jb, err := b.ReadAll(context.Background(), journalKey, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			var journal []struct {
				File string `json:"file"`
				Size int64  `json:"size"`
			}
			if err := json.Unmarshal(jb, &journal); err != nil {
				t.Fatalf("the journal: %v\n%s", err, jb)
			}
			var done []string
			for _, e := range journal {
				if e.Size >= 0 {
					done = append(done, e.File)
				}
			}
			if len(done) < 5 || len(done) >= len(want) {
				t.Fatalf("the killed run finished %d of %d files", len(done), len(want))
			}
			left := filepath.Join(dir, c.scheme+"-killed")
			if _, err := buckettest.GetTree(context.Background(), dst, left); err != nil {
				t.Fatal(err)
			}
			before := treeHashes(t, left)
			// Refused, touching nothing: a plain rerun (the killed run may be going still)
			// and a resume with other options.
			for _, r := range []struct {
				args []string
				msg  string
			}{
				{args(dst), "keeps the files it finished (make sure that run is not still going) (--resume, with the options of that conversion, finishes it)"},
				{append(args(dst, "--resume"), "--dtype", "float16"), "the source or the options differ"},
				{append(args(dst, "--resume"), "--max-shard-size", "3MiB"), "the source or the options differ"},
			} {
				out, err := ckptCmd(r.args...).CombinedOutput()
				if err == nil || !strings.Contains(string(out), r.msg) {
					t.Errorf("%v: %v\n%s", r.args[len(r.args)-2:], err, out)
				}
			}
			again := filepath.Join(dir, c.scheme+"-refused")
			if _, err := buckettest.GetTree(context.Background(), dst, again); err != nil {
				t.Fatal(err)
			}
			if got := treeHashes(t, again); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("a refused run changed the objects:\nbefore %v\nafter  %v", before, got)
			}
			uploads.reset()
			out, err := ckptCmd(args(dst, "--resume")...).CombinedOutput()
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), fmt.Sprintf("resumed: kept %d files", len(done))) {
				t.Errorf("resume did not keep the %d files the killed run finished:\n%s", len(done), out)
			}
			started := uploads.reset()
			t.Logf("killed after %d of %d files; the resume started uploads %v\n%s", len(done), len(want), started, out)
			for _, name := range done {
				if started[name] != 0 {
					t.Errorf("%s, finished by the killed run, was uploaded again (%d uploads)", name, started[name])
				}
			}
			for name := range want {
				if !slices.Contains(done, name) && started[name] != 1 {
					t.Errorf("%s: %d uploads by the resumed run, want 1", name, started[name])
				}
			}
			if started["ckpt-manifest.json"] != 1 {
				t.Errorf("the manifest was uploaded %d times", started["ckpt-manifest.json"])
			}
			if out, err := run(t, "check", dst); err != nil {
				t.Fatalf("check of the resumed output: %v\n%s", err, out)
			}
			got := filepath.Join(dir, c.scheme+"-resumed")
			names, err := buckettest.GetTree(context.Background(), dst, got)
			if err != nil {
				t.Fatal(err)
			}
			if h := treeHashes(t, got); fmt.Sprint(h) != fmt.Sprint(want) || !slices.Contains(names, "ckpt-manifest.json") {
				t.Fatalf("resumed output %v\ndiffers from the uninterrupted one %v", names, want)
			}

			// A single file: an interrupted upload leaves its marker and no object.
			file := c.scheme + "://ckpt/resume/one.safetensors"
			fl, _ := bucket.Parse(file)
			if err := b.Put(context.Background(), fl.Key+bucket.PartialMarker, []byte("ckpt output in progress\nrun 0123\n"), bucket.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if out, err := ckptCmd(args(file, "--resume")...).CombinedOutput(); err == nil || !strings.Contains(string(out), "leaves nothing to keep") {
				t.Errorf("--resume of a single file: %v\n%s", err, out)
			}
			if err := b.Delete(context.Background(), fl.Key+bucket.PartialMarker); err != nil {
				t.Fatal(err)
			}
			// Nothing to resume: --resume converts as a plain run does, into a file and a
			// folder.
			for _, d := range []string{file, c.scheme + "://ckpt/resume/fresh"} {
				if out, err := ckptCmd(args(d, "--resume")...).CombinedOutput(); err != nil || strings.Contains(string(out), "resumed") {
					t.Errorf("--resume with nothing to resume into %s: %v\n%s", d, err, out)
				}
				if out, err := run(t, "check", d); err != nil {
					t.Errorf("check %s: %v\n%s", d, err, out)
				}
			}
		})
	}
}
