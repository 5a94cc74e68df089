// Package oracle lets Go tests ask real PyTorch, safetensors and transformers for ground
// truth. scripts/oracle builds a Debian chroot with them; tests that need it call Require,
// which skips loudly when the oracle is not built — unless CKPT_REQUIRE_ORACLE=1 (set by
// .ci/run), where a missing oracle fails the test instead of hiding it.
package oracle

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RepoRoot is the repository's top folder (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Oracle runs Python in the PyTorch chroot.
type Oracle struct {
	script string
}

// Require returns the oracle, or skips (fails under CKPT_REQUIRE_ORACLE=1) when it is absent.
func Require(t testing.TB) *Oracle {
	t.Helper()
	o := &Oracle{script: filepath.Join(RepoRoot(), "scripts", "oracle")}
	out, err := exec.Command(o.script, "dir").CombinedOutput()
	if err == nil && os.Geteuid() == 0 {
		return o
	}
	why := strings.TrimSpace(string(out))
	if os.Geteuid() != 0 {
		why = "running the oracle chroot needs root"
	}
	msg := fmt.Sprintf("ORACLE MISSING: %s — this test compares against real PyTorch; build it with `scripts/oracle build`", why)
	if os.Getenv("CKPT_REQUIRE_ORACLE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil
}

// Python runs `python3 args...` in the chroot with the repository mounted at /repo (the
// working directory). Paths passed must be inside the repository, relative to it.
func (o *Oracle) Python(args ...string) ([]byte, error) {
	cmd := exec.Command(o.script, append([]string{"python"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("oracle python %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// TempDir returns a fresh folder inside the repository (so the chroot sees it, under
// /repo) that is removed when the test ends, and its path as the chroot sees it.
func TempDir(t testing.TB) (host, inChroot string) {
	t.Helper()
	base := filepath.Join(RepoRoot(), ".oracle-tmp")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rel, _ := filepath.Rel(RepoRoot(), dir)
	return dir, "/repo/" + filepath.ToSlash(rel)
}
