package main

import (
	"encoding/binary"
	"errors"
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

// TestInterruptRemovesPartialOutput interrupts a conversion while it writes (a sparse 1 GiB
// tensor) and checks that the process exits 130 and leaves no partial output behind.
func TestInterruptRemovesPartialOutput(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "big.safetensors")
	header := `{"w":{"dtype":"BF16","shape":[536870912],"data_offsets":[0,1073741824]}}`
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(header)))
	f.WriteString(header)
	if err := f.Truncate(int64(8 + len(header) + 1<<30)); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	for _, format := range []string{"torch", "safetensors"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+format)
			cmd := exec.Command(os.Args[0], "convert", "--to", "tpu", "--format", format, src, out)
			cmd.Env = append(os.Environ(), "CKPT_TEST_MAIN=1")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			partial := ""
			for deadline := time.Now().Add(20 * time.Second); partial == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				m, _ := filepath.Glob(filepath.Join(dir, ".out-"+format+".partial*"))
				if len(m) > 0 {
					if st, err := os.Stat(m[0]); err == nil && (st.IsDir() || st.Size() > 0) {
						partial = m[0]
					}
				}
			}
			if partial == "" {
				cmd.Process.Kill()
				t.Fatal("no partial output appeared")
			}
			cmd.Process.Signal(syscall.SIGINT)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("exit %v, want status 130; stderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "removed") {
				t.Errorf("stderr does not say the partial output was removed:\n%s", stderr.String())
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*out-"+format+"*"))
			if len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}
