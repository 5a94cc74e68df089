package safetensors

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// repoRoot is the repository root relative to this package's directory, where go test runs.
const repoRoot = "../.."

// oracle runs `scripts/oracle python args...` (torch 2.14 + safetensors 0.8 in a chroot with the
// repository mounted at /repo and as working directory) and returns its standard output. Paths
// in args are relative to the repository root. When the oracle is not built the test is skipped
// with a loud message, or fails if CKPT_REQUIRE_ORACLE=1.
func oracle(t *testing.T, args ...string) []byte {
	t.Helper()
	script := filepath.Join(repoRoot, "scripts", "oracle")
	if out, err := exec.Command(script, "dir").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("ORACLE MISSING: %s dir: %v: %s", script, err, bytes.TrimSpace(out))
		if os.Getenv("CKPT_REQUIRE_ORACLE") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, "!!! "+msg)
		t.Skip(msg)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(script, append([]string{"python"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("oracle python %v: %v\n%s", args, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// oracleTempDir returns a fresh directory under testdata/safetensors, which the oracle sees at
// the same repository-relative path, and removes it when the test ends.
func oracleTempDir(t *testing.T) (abs, rel string) {
	t.Helper()
	parent := filepath.Join(repoRoot, "testdata", "safetensors")
	dir, err := os.MkdirTemp(parent, ".oracle-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, filepath.Join("testdata", "safetensors", filepath.Base(dir))
}
