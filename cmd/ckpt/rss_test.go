package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// rssOutEnv names the file a measuring process (see measuredMain) writes its child's peak
// RSS to.
const rssOutEnv = "CKPT_TEST_RSS_OUT"

// measured rewrites cmd to run through a fresh copy of the test binary that starts cmd and
// records its peak RSS, and returns a function giving that peak in bytes once cmd has run.
//
// A child started straight from the test process reports the test process's peak, not its
// own: os/exec starts children with vfork, so the child runs on its parent's address space
// until exec, and Linux carries that address space's high-water mark into the child's
// ru_maxrss. The measuring process is freshly executed (a few MiB), so the mark it passes on
// is its own.
func measured(t *testing.T, cmd *exec.Cmd) func() int64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "maxrss")
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, rssOutEnv+"="+out)
	cmd.Args = append([]string{os.Args[0], cmd.Path}, cmd.Args[1:]...)
	cmd.Path = os.Args[0]
	return func() int64 {
		t.Helper()
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("measuring process left no peak RSS: %v", err)
		}
		kib, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return kib << 10 // ru_maxrss is in KiB on Linux
	}
}

// measuredMain is the measuring process: it runs os.Args[1:] with the environment minus
// rssOutEnv and the standard streams passed through (killed if the measuring process dies), writes the child's ru_maxrss (KiB) to
// the file rssOutEnv names and exits with the child's status.
func measuredMain(out string) {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, rssOutEnv+"=") {
			env = append(env, e)
		}
	}
	child := exec.Command(os.Args[1], os.Args[2:]...)
	child.Env = env
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	dieWithParent(child) // a test's timeout kill reaches it
	err := child.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "measuring process:", err)
		os.Exit(125)
	}
	if kib, ok := maxRSS(child.ProcessState); ok {
		os.WriteFile(out, []byte(strconv.FormatInt(kib, 10)), 0o644)
	}
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(child.ProcessState.ExitCode())
}

// TestMeasuredIgnoresParentPeak: a child measured through measured reports its own peak,
// not the test process's — which is made to hold 256 MiB first.
func TestMeasuredIgnoresParentPeak(t *testing.T) {
	ballast := make([]byte, 256<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	cmd := ckptCmd("version")
	peak := measured(t, cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	direct := ckptCmd("version")
	if out, err := direct.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kib, _ := maxRSS(direct.ProcessState)
	naive := kib << 10
	got := peak()
	t.Logf("ckpt version: peak RSS %d MiB measured, %d MiB straight from a 256 MiB parent", got>>20, naive>>20)
	if got >= 128<<20 {
		t.Errorf("measured peak %d MiB carries the parent's 256 MiB", got>>20)
	}
	ballast[len(ballast)-1] = 0 // keep the ballast alive until here
}
