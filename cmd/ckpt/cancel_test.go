package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"syscall"
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

// TestInterruptCancels: SIGINT to a command with no output in flight — inspect, scan,
// check and verify stalled on bucket reads — cancels its context: it returns by itself,
// exits 130 and with --json prints its error object of kind "interrupted", well before
// the handler's grace runs out.
func TestInterruptCancels(t *testing.T) {
	gcs, _ := buckettest.Start(t, "ckpt")
	local := "../../testdata/torch/training_cuda.pt"
	src, dst := "gs://ckpt/interrupt/in.pt", "gs://ckpt/interrupt/out"
	if err := buckettest.PutTree(context.Background(), local, src); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "convert", "--to", "tpu", local, dst+"/out.pt"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", "--hash", "--json", src},
		{"scan", "--json", src},
		{"check", "--json", dst + "/out.pt"},
		{"verify", "--json", local, dst + "/out.pt"},
	} {
		gcs.SetFaults(buckettest.Faults{Match: buckettest.Reads, Delay: 1, DelayBy: 20 * time.Second, Seed: 1})
		before := gcs.Requests.Load()
		cmd := ckptCmd(args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Stalled on its first read: the process has started and its handler is in place.
		for deadline := time.Now().Add(20 * time.Second); gcs.Requests.Load() == before && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		took := time.Since(start)
		gcs.SetFaults(buckettest.Faults{})
		var rep struct {
			Error struct {
				Kind       string `json:"kind"`
				ExitStatus int    `json:"exit_status"`
			} `json:"error"`
		}
		jerr := json.Unmarshal(stdout.Bytes(), &rep)
		if code := cmd.ProcessState.ExitCode(); code != 130 || jerr != nil || rep.Error.Kind != "interrupted" || rep.Error.ExitStatus != 130 {
			t.Errorf("%v: exit %d, JSON %+v (%v)\nstdout:\n%s\nstderr:\n%s", args, code, rep, jerr, stdout.String(), stderr.String())
		}
		if took > 2*time.Second {
			t.Errorf("%v: ended %v after SIGINT (the handler's grace is %v)", args, took, unwindGrace)
		}
	}
}
