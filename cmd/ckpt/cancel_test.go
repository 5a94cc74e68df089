package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
)

// TestCancelledBucketRead: inspect, scan, check and verify of a checkpoint in a bucket whose
// server stalls every read end within a second of their command's context being cancelled,
// with context.Canceled: each command reads through cmd.Context(), not a context of its own.
func TestCancelledBucketRead(t *testing.T) {
	gcs, s3 := buckettest.Start(t, "ckpt")
	local := "../../testdata/torch/training_cuda.pt"
	out := filepath.Join(t.TempDir(), "out.pt")
	if _, err := run(t, "convert", "--to", "tpu", local, out); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		scheme string
		srv    *buckettest.Server
	}{{"gs", gcs}, {"s3", s3}} {
		src, dst := c.scheme+"://ckpt/cancel/in.pt", c.scheme+"://ckpt/cancel/out"
		if err := buckettest.PutTree(context.Background(), local, src); err != nil {
			t.Fatal(err)
		}
		if _, err := run(t, "convert", "--to", "tpu", local, dst+"/out.pt"); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"inspect", "--hash", src},
			{"scan", src},
			{"check", dst + "/out.pt"},
			{"verify", src, dst + "/out.pt"},
			{"verify", local, dst + "/out.pt"},
		} {
			root := newRoot()
			root.SetArgs(args)
			root.SetOut(new(discard))
			root.SetErr(new(discard))
			ctx, cancel := context.WithCancel(context.Background())
			c.srv.SetFaults(buckettest.Faults{Match: buckettest.Reads, Delay: 1, DelayBy: 5 * time.Second, Seed: 1})
			time.AfterFunc(200*time.Millisecond, cancel)
			start := time.Now()
			err := root.ExecuteContext(ctx)
			took := time.Since(start)
			c.srv.SetFaults(buckettest.Faults{})
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%v: %v, want context.Canceled", args, err)
			}
			if took > 1200*time.Millisecond {
				t.Errorf("%v: returned %v after its context began", args, took)
			}
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
