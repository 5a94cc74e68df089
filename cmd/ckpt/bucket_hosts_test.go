package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// TestBucketMultiHostKillResume runs the 2 hosts of a per-device conversion as processes
// writing into a GCS and an S3 prefix, and kills host 1 with SIGKILL once it finished one
// of its rank files, while host 0 has sealed its share and waits: nothing then passes
// ckpt check; host 1 run again with --resume keeps the object it finished, host 0 finishes,
// and the objects are exactly the files one process writes locally. Run again, a host
// reports the conversion done.
func TestBucketMultiHostKillResume(t *testing.T) {
	buckettest.Start(t, "ckpt")
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	bigSource(t, src, 16, 1<<20) // 64 MiB of float32: 8 MiB per rank file
	args := func(dst string, extra ...string) []string {
		return append([]string{"convert", "--to", "tpu", "--mesh", "fsdp=8", "--format", "dcp", "--num-hosts", "2", src, dst}, extra...)
	}
	single := filepath.Join(dir, "single")
	if _, err := run(t, "convert", "--to", "tpu", "--mesh", "fsdp=8", "--format", "dcp", src, single); err != nil {
		t.Fatal(err)
	}
	want := treeHashes(t, single)
	finished := regexp.MustCompile(`"size":[0-9]`)
	for _, scheme := range []string{"gs", "s3"} {
		dst := scheme + "://ckpt/hosts/out"
		l, _ := bucket.Parse(dst)
		b, err := bucket.Default.Bucket(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		host0 := ckptCmd(args(dst, "--host-index", "0")...)
		var out0 bytes.Buffer
		host0.Stdout, host0.Stderr = &out0, &out0
		if err := host0.Start(); err != nil {
			t.Fatal(err)
		}
		host1 := ckptCmd(args(dst, "--host-index", "1")...)
		var out1 bytes.Buffer
		host1.Stdout, host1.Stderr = &out1, &out1
		if err := host1.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			j, _ := b.ReadAll(context.Background(), l.Key+"/.ckpt-host-1.journal", 1<<20)
			if finished.Match(j) {
				killed = host1.Process.Signal(syscall.SIGKILL) == nil
				break
			}
		}
		host1.Wait()
		if !killed {
			t.Fatalf("%s: host 1 was not killed midway:\n%s", scheme, out1.String())
		}
		if _, err := b.Attributes(context.Background(), l.Key+"/.ckpt-host-1.part"); err == nil {
			t.Fatalf("%s: host 1 sealed its share before it was killed", scheme)
		}
		if out, err := run(t, "check", dst); err == nil {
			t.Fatalf("%s: ckpt check passes with host 1 killed:\n%s", scheme, out)
		}
		out, err := ckptCmd(args(dst, "--host-index", "1", "--resume")...).CombinedOutput()
		if err != nil || !regexp.MustCompile(`resumed: kept [1-3] file`).Match(out) {
			t.Fatalf("%s: host 1 resumed: %v\n%s", scheme, err, out)
		}
		if err := host0.Wait(); err != nil || !strings.Contains(out0.String(), "every host finished") {
			t.Fatalf("%s: host 0: %v\n%s", scheme, err, out0.String())
		}
		if out, err := run(t, "check", dst); err != nil {
			t.Fatalf("%s: check: %v\n%s", scheme, err, out)
		}
		got := filepath.Join(dir, scheme)
		names, err := buckettest.GetTree(context.Background(), dst, got)
		if err != nil {
			t.Fatal(err)
		}
		if h := treeHashes(t, got); fmt.Sprint(h) != fmt.Sprint(want) {
			t.Fatalf("%s: after the kill %v (%v)\none process %v\nhost 1 resumed:\n%s", scheme, h, names, want, out)
		}
		t.Logf("%s: host 1 resumed:\n%s", scheme, out)
		again, err := ckptCmd(args(dst, "--host-index", "1")...).CombinedOutput()
		if err != nil || !bytes.Contains(again, []byte("already complete")) {
			t.Fatalf("%s: host 1 again: %v\n%s", scheme, err, again)
		}
	}
}
