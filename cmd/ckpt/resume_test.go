package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/internal/fifotest"
)

// bigSource writes a float32 safetensors file of n tensors of size floats each.
func bigSource(t *testing.T, path string, n, size int) {
	t.Helper()
	var hdr strings.Builder
	hdr.WriteString("{")
	for i := range n {
		if i > 0 {
			hdr.WriteString(",")
		}
		fmt.Fprintf(&hdr, `"layers.%03d.weight":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}`, i, size, i*size*4, (i+1)*size*4)
	}
	hdr.WriteString("}")
	h := hdr.String()
	for len(h)%8 != 0 {
		h += " "
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.WriteString(h)
	r := rand.New(rand.NewPCG(3, 4))
	for range n * size {
		binary.Write(&b, binary.LittleEndian, math.Float32bits(float32(r.NormFloat64())))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// treeHashes is the SHA-256 of every file of a folder output, manifest aside.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "ckpt-manifest.json" {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		s := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(s[:])
	}
	return out
}

// finishedLines counts the files a journal records as finished (it also records each file
// as it is created).
func finishedLines(journal []byte) int {
	return bytes.Count(journal, []byte(`"xxhash64"`))
}

func ckptCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CKPT_TEST_MAIN=1")
	return cmd
}

// TestKillResume kills a multi-shard conversion with SIGKILL after various numbers of
// finished shards, checks that what it left passes no `ckpt check` and that a second
// conversion into the same destination is refused while one runs, then resumes: the output
// must be byte-identical to an uninterrupted conversion's (issue 14, item 11). Without
// --resume the leftovers are removed and the run starts over.
func TestKillResume(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	bigSource(t, src, 40, 1<<20) // 40 tensors of 4 MiB: 40 shards of 2 MiB bfloat16
	args := func(dst string, extra ...string) []string {
		return append([]string{"convert", "--to", "tpu", "--format", "safetensors", "--dtype", "bfloat16", "--max-shard-size", "2MiB", src, dst}, extra...)
	}
	ref := filepath.Join(dir, "ref")
	if out, err := ckptCmd(args(ref)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted: %v\n%s", err, out)
	}
	want := treeHashes(t, ref)
	if len(want) < 40 {
		t.Fatalf("only %d files", len(want))
	}
	for _, killAt := range []int{1, 7, 23, 39} {
		t.Run(fmt.Sprint(killAt), func(t *testing.T) {
			dst := filepath.Join(dir, fmt.Sprintf("out%d", killAt))
			journal := filepath.Join(dir, fmt.Sprintf(".out%d.partial", killAt), ".ckpt-journal")
			cmd := ckptCmd(args(dst)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
				b, _ := os.ReadFile(journal)
				if finishedLines(b) >= killAt {
					if killAt == 7 {
						// A second conversion into the same destination is refused, not raced.
						// The first is stopped meanwhile, so that it still holds the lock
						// however slowly the second starts on a loaded machine.
						stopProcess(t, cmd.Process)
						out, err := ckptCmd(args(dst, "--resume")...).CombinedOutput()
						if err == nil || !strings.Contains(string(out), "another ckpt is writing") {
							t.Errorf("second conversion while one runs: %v\n%s", err, out)
						}
					}
					killed = cmd.Process.Signal(syscall.SIGKILL) == nil
					break
				}
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !killed || !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the conversion was not killed after %d files: %v", killAt, err)
			}
			if _, err := os.Stat(dst); !os.IsNotExist(err) {
				t.Fatalf("a killed run left %s in place", dst)
			}
			if out, err := ckptCmd("check", dst).CombinedOutput(); err == nil {
				t.Fatalf("check passed a killed run's output:\n%s", out)
			}
			out, err := ckptCmd(args(dst, "--resume")...).CombinedOutput()
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "resumed: kept") {
				t.Errorf("resume kept nothing:\n%s", out)
			}
			got := treeHashes(t, dst)
			var diff []string
			for name, h := range want {
				if got[name] != h {
					diff = append(diff, name)
				}
			}
			sort.Strings(diff)
			if len(got) != len(want) || len(diff) > 0 {
				t.Fatalf("resumed output differs from the uninterrupted one: %d vs %d files, differing %v", len(got), len(want), diff)
			}
			if out, err := ckptCmd("check", dst).CombinedOutput(); err != nil {
				t.Fatalf("check of the resumed output: %v\n%s", err, out)
			}
		})
	}
	// Without --resume, a killed run's leftovers are removed and the conversion starts over.
	dst := filepath.Join(dir, "fresh")
	cmd := ckptCmd(args(dst)...)
	cmd.Start()
	journal := filepath.Join(dir, ".fresh.partial", ".ckpt-journal")
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		if b, _ := os.ReadFile(journal); finishedLines(b) >= 3 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	out, err := ckptCmd(args(dst)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "removed the partial output an interrupted conversion left") {
		t.Fatalf("rerun without --resume: %v\n%s", err, out)
	}
	if got := treeHashes(t, dst); len(got) != len(want) {
		t.Fatalf("%d files after a fresh rerun, want %d", len(got), len(want))
	}
}

// TestKillResumePlanted kills a conversion, then plants in its partial folder — a link to
// a file outside and a hard link to it in place of finished shards, a FIFO in place of one
// being written, a link to a folder outside — one at a time: every rerun, with --resume or
// without, refuses naming the plant, and neither the plant nor what it leads to changes.
// Once the plants are gone the run resumes (issue 29, class 2).
func TestKillResumePlanted(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	bigSource(t, src, 24, 1<<20)
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(outside, "folder"), 0o755)
	victim := filepath.Join(outside, "victim.txt")
	os.WriteFile(victim, []byte("VICTIM"), 0o644)
	os.WriteFile(filepath.Join(outside, "folder", "inner.txt"), []byte("INNER"), 0o644)
	dst := filepath.Join(dir, "out")
	args := func(extra ...string) []string {
		return append([]string{"convert", "--to", "tpu", "--format", "safetensors", "--dtype", "bfloat16", "--max-shard-size", "2MiB", src, dst}, extra...)
	}
	partial := filepath.Join(dir, ".out.partial")
	cmd := ckptCmd(args()...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		if b, _ := os.ReadFile(filepath.Join(partial, ".ckpt-journal")); finishedLines(b) >= 6 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	var finished []string
	b, _ := os.ReadFile(filepath.Join(partial, ".ckpt-journal"))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"xxhash64"`) {
			name := strings.Split(strings.Split(line, `"file":"`)[1], `"`)[0]
			finished = append(finished, name)
		}
	}
	if len(finished) < 5 {
		t.Fatalf("the run was not killed midway: finished %v", finished)
	}
	outsideState := func() string {
		var s strings.Builder
		filepath.WalkDir(outside, func(p string, d os.DirEntry, err error) error {
			st, _ := os.Lstat(p)
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&s, "%s %v %d %q\n", p, st.Mode(), inode(st), c)
			return nil
		})
		return s.String()
	}
	before := outsideState()
	for i, pl := range []struct {
		name string
		make func(p string) error
	}{
		{"a link to a file outside", func(p string) error { return os.Symlink(victim, p) }},
		{"a hard link to a file outside", func(p string) error { return os.Link(victim, p) }},
		{"a link to a folder outside", func(p string) error { return os.Symlink(filepath.Join(outside, "folder"), p) }},
		{"a FIFO", func(p string) error { fifotest.Make(t, p); return nil }},
	} {
		at := filepath.Join(partial, finished[i])
		os.Remove(at)
		if err := pl.make(at); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Lstat(at)
		for _, extra := range [][]string{{"--resume"}, nil, {"--resume", "--force"}} {
			out, err := ckptCmd(args(extra...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), finished[i]) {
				t.Errorf("%s in place of %s, convert %v: %v, want a refusal naming it\n%s", pl.name, finished[i], extra, err, out)
			}
			if got, _ := os.Lstat(at); got == nil || !os.SameFile(st, got) || got.Mode() != st.Mode() {
				t.Errorf("%s in place of %s, convert %v: the plant changed", pl.name, finished[i], extra)
			}
			if after := outsideState(); after != before {
				t.Fatalf("%s, convert %v: outside changed:\n%s\n→\n%s", pl.name, extra, before, after)
			}
		}
		os.Remove(at)
	}
	out, err := ckptCmd(args("--resume")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "resumed: kept") {
		t.Fatalf("resume once the plants are gone: %v\n%s", err, out)
	}
	if out, err := ckptCmd("check", dst).CombinedOutput(); err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
}
