package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets tests run the real command in a child process (CKPT_TEST_MAIN=1): signals
// can only be tested on a process of its own; and measure a child's peak RSS (see measured).
func TestMain(m *testing.M) {
	if out := os.Getenv(rssOutEnv); out != "" {
		measuredMain(out)
	}
	if os.Getenv("CKPT_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestInterruptRemovesPartialOutput interrupts conversions into every kind of output (a
// single file and its manifest, an HF folder, a DCP folder) of a sparse 1 GiB tensor at
// several points: the moment the partial output appears — where the signal once raced the
// writer, which made the removed partial folder again — and some milliseconds on, while
// it writes. Every run must exit 130, say it removed the partial output and leave nothing
// of it behind.
func TestInterruptRemovesPartialOutput(t *testing.T) {
	src := filepath.Join(t.TempDir(), "big.safetensors")
	sparseSafetensors(t, src, []string{"w"}, [][]int64{{1 << 29}}) // 1 GiB, no disk used
	outputs := []struct{ format, name string }{
		{"torch", "out.pt"},
		{"safetensors", "out.safetensors"},
		{"safetensors", "out-hf"},
		{"dcp", "out-dcp"},
	}
	delays := []time.Duration{0, 0, 0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}
	for _, o := range outputs {
		for i, delay := range delays {
			t.Run(fmt.Sprintf("%s/%s/%d-%v", o.format, o.name, i, delay), func(t *testing.T) {
				dir := t.TempDir()
				code, stderr := interruptConvert(t, src, filepath.Join(dir, o.name), o.format, delay)
				if code != 130 {
					t.Fatalf("exit status %d, want 130; stderr:\n%s", code, stderr)
				}
				if !strings.Contains(stderr, "removed") {
					t.Errorf("stderr does not say the partial output was removed:\n%s", stderr)
				}
				if left, _ := os.ReadDir(dir); len(left) != 0 {
					t.Fatalf("left behind: %v; stderr:\n%s", left, stderr)
				}
			})
		}
	}
}

// interruptConvert runs `ckpt convert --to tpu --format format src dst` in a child
// process, sends it SIGINT delay after its partial output appears, and returns its exit
// status and stderr.
func interruptConvert(t *testing.T, src, dst, format string, delay time.Duration) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "convert", "--to", "tpu", "--format", format, src, dst)
	cmd.Env = append(os.Environ(), "CKPT_TEST_MAIN=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".partial")
	appeared := false
	for deadline := time.Now().Add(20 * time.Second); !appeared && time.Now().Before(deadline); {
		_, err := os.Lstat(partial)
		appeared = err == nil
	}
	if !appeared {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no partial output %s appeared; stderr:\n%s", partial, stderr.String())
	}
	time.Sleep(delay)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}
