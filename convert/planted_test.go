//go:build unix

package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/verify"
)

// The hostile partial-folder table (issue 29, class 2): for each name ckpt uses in a
// partial folder (control files, output files, the partial folder itself) and each kind of
// plant — a link to a file outside, a link to a folder outside, a hard link to a file
// outside, a FIFO, a folder where a file goes, someone's own file, a forged journal —
// every operation (convert, --force, --resume, a file output, the hosts of a multi-host
// conversion, a run interrupted while the plant appears) leaves a sentinel tree outside
// the output byte-identical and every planted entry as it was planted. An operation that
// refuses names what is in its way; one that succeeds leaves a complete output.

// sentinel is a tree outside any output: the target of every link and hard link planted.
type sentinel struct {
	root, file, dir string
}

func newSentinel(t *testing.T, base string) sentinel {
	t.Helper()
	s := sentinel{root: filepath.Join(base, "outside")}
	s.file = filepath.Join(s.root, "victim.txt")
	s.dir = filepath.Join(s.root, "dir")
	os.MkdirAll(s.dir, 0o755)
	if err := os.WriteFile(s.file, []byte("VICTIM: nothing may change me"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.dir, "inner.txt"), []byte("INNER"), 0o644)
	os.WriteFile(filepath.Join(s.dir, "model.safetensors"), []byte("INNER MODEL"), 0o644)
	return s
}

// state describes every entry under root without following links: kind, mode, content
// or link target, and the inode (an entry replaced by another of the same bytes changed).
func state(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		st, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		ino := st.Sys().(*syscall.Stat_t).Ino
		desc := fmt.Sprintf("%v ino=%d", st.Mode(), ino)
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case st.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	return out
}

func sameState(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	sameStateAdding(t, what, before, after, false)
}

// sameStateAdding is sameState, allowing entries to appear with adding.
func sameStateAdding(t *testing.T, what string, before, after map[string]string, adding bool) {
	t.Helper()
	short := func(s string) string {
		if len(s) > 80 {
			return s[:80] + "…"
		}
		return s
	}
	var diff []string
	for k, v := range before {
		if after[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q → %q", k, short(v), short(after[k])))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok && !adding {
			diff = append(diff, fmt.Sprintf("%s: appeared (%q)", k, short(v)))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%s changed:\n  %s", what, strings.Join(diff, "\n  "))
	}
}

// plant is one kind of entry put at a name by someone else.
type plant struct {
	name string
	make func(t *testing.T, s sentinel, path string)
}

var plants = []plant{
	{"link to a file outside", func(t *testing.T, s sentinel, p string) { must(t, os.Symlink(s.file, p)) }},
	{"link to a folder outside", func(t *testing.T, s sentinel, p string) { must(t, os.Symlink(s.dir, p)) }},
	{"dangling link outside", func(t *testing.T, s sentinel, p string) {
		must(t, os.Symlink(filepath.Join(s.root, "created-through-a-link"), p))
	}},
	{"hard link to a file outside", func(t *testing.T, s sentinel, p string) { must(t, os.Link(s.file, p)) }},
	{"FIFO", func(t *testing.T, s sentinel, p string) { must(t, syscall.Mkfifo(p, 0o644)) }},
	{"folder where a file goes", func(t *testing.T, s sentinel, p string) {
		must(t, os.Mkdir(p, 0o755))
		must(t, os.WriteFile(filepath.Join(p, "keep.txt"), []byte("KEEP"), 0o644))
	}},
	{"someone's file", func(t *testing.T, s sentinel, p string) { must(t, os.WriteFile(p, []byte("MINE"), 0o644)) }},
}

// forged journals: lines ckpt would never write, naming what lies outside the folder.
func forgedJournal(s sentinel) string {
	var b strings.Builder
	for _, name := range []string{"../outside/victim.txt", s.file, "..", "dir/../../outside/victim.txt", "model.safetensors", "outside-link/inner.txt"} {
		fmt.Fprintf(&b, `{"file":%q,"size":29,"xxhash64":"0000000000000000"}`+"\n", name)
		fmt.Fprintf(&b, `{"file":%q,"size":-1}`+"\n", name)
	}
	fmt.Fprintf(&b, `{"ckpt_journal":2,"folder":1,"self":2}`+"\n")
	fmt.Fprintf(&b, `{"dir":"..","ino":5}`+"\n")
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hangAfter is how long an operation may take before it counts as hung.
const hangAfter = 60 * time.Second

// timeout runs f, failing the test if it does not return in time; then it keeps releasing
// whatever f waits on (unblock) until it returns.
func timeout(t *testing.T, what string, unblock func(), f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangAfter):
		t.Errorf("%s hung", what)
		for {
			unblock()
			select {
			case err := <-done:
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// unblockFIFOs opens every FIFO under root for reading and writing for a moment, which
// releases an open waiting on one, and then closes it, which ends a read waiting on one.
func unblockFIFOs(root string) func() {
	return func() {
		var open []*os.File
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeNamedPipe != 0 {
				if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
					open = append(open, f)
				}
			}
			return nil
		})
		time.Sleep(50 * time.Millisecond)
		for _, f := range open {
			f.Close()
		}
	}
}

// hostileCase is one operation on a destination with something planted.
type hostileCase struct {
	name string
	// dst is the output's name in the test folder; partial where plants go (relative).
	dst, partial string
	// before runs ahead of the plant (an earlier output for --force).
	before func(t *testing.T, base string)
	// run is the operation; it may plant (interrupted runs) through plantNow.
	run func(t *testing.T, base string, plantNow func()) error
	// names are the names planted in the partial folder.
	names []string
}

const hfSource = "../testdata/hf/mistral_sharded"

func folderRun(extra func(*Options)) func(t *testing.T, base string, plantNow func()) error {
	return func(t *testing.T, base string, plantNow func()) error {
		o := DefaultOptions(hfSource, filepath.Join(base, "out"))
		o.Format, o.ToolVersion = formats.SafetensorsFile, "test"
		if extra != nil {
			extra(&o)
		}
		_, err := Run(context.Background(), o)
		return err
	}
}

func fileRun(force bool) func(t *testing.T, base string, plantNow func()) error {
	return func(t *testing.T, base string, plantNow func()) error {
		o := DefaultOptions("../testdata/torch/training_cuda.pt", filepath.Join(base, "out.pt"))
		o.Format, o.ToolVersion, o.Force = formats.TorchFile, "test", force
		_, err := Run(context.Background(), o)
		return err
	}
}

func TestPlantedPartial(t *testing.T) {
	folderNames := []string{".ckpt-journal", "model.safetensors", "config.json", "ckpt-manifest.json", ".ckpt-host-0.lock", "outside-link"}
	fileNames := []string{"out.pt", ".ckpt-journal"}
	hosts := newHostsFixture(t, "cpu", "fsdp=2")
	hostOpts := hosts.options(formats.DCPFolder, 2*time.Second)
	hostNames := []string{".ckpt-host-0.lock", ".ckpt-host-1.lock", ".ckpt-host-1.journal", ".ckpt-host-0.journal", ".ckpt-host-1.part",
		".ckpt-host-1.part.tmp", ".ckpt-host-0.part.tmp", "__0_0.distcp", "__1_0.distcp", ".metadata", "ckpt-manifest.json"}
	runHosts := func(t *testing.T, base string, plantNow func()) error {
		dst := filepath.Join(base, "out")
		o1 := hostOpts(dst, 1, 2)
		_, err1 := Run(context.Background(), o1)
		_, err0 := Run(context.Background(), hostOpts(dst, 0, 2))
		return errors.Join(err1, err0)
	}
	earlierFolder := func(t *testing.T, base string) {
		if err := folderRun(nil)(t, base, nil); err != nil {
			t.Fatal(err)
		}
	}
	earlierFile := func(t *testing.T, base string) {
		if err := fileRun(false)(t, base, nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := []hostileCase{
		{name: "convert", dst: "out", partial: ".out.partial", run: folderRun(nil), names: folderNames},
		{name: "convert --resume", dst: "out", partial: ".out.partial", run: folderRun(func(o *Options) { o.Resume = true }), names: folderNames},
		{name: "convert --force", dst: "out", partial: ".out.partial", before: earlierFolder, run: folderRun(func(o *Options) { o.Force = true }), names: folderNames},
		{name: "convert --force --resume", dst: "out", partial: ".out.partial", before: earlierFolder, run: folderRun(func(o *Options) { o.Force, o.Resume = true, true }), names: folderNames},
		{name: "file output", dst: "out.pt", partial: ".out.pt.partial", run: fileRun(false), names: fileNames},
		{name: "file output --force", dst: "out.pt", partial: ".out.pt.partial", before: earlierFile, run: fileRun(true), names: fileNames},
		{name: "file output's manifest", dst: "out.pt", partial: ".out.pt.ckpt-manifest.json.partial", run: fileRun(false), names: []string{"out.pt.ckpt-manifest.json", ".ckpt-journal"}},
		{name: "hosts", dst: "out", partial: ".out.partial", run: runHosts, names: hostNames},
	}
	for _, c := range cases {
		for _, name := range c.names {
			for _, pl := range plants {
				t.Run(c.name+"/"+name+"/"+pl.name, func(t *testing.T) {
					c.check(t, func(t *testing.T, s sentinel, partial string) []string {
						must(t, os.MkdirAll(partial, 0o700))
						if name == "outside-link" {
							// A folder of the output's path made a link: files created
							// "beneath" it would land outside.
							must(t, os.Symlink(s.dir, filepath.Join(partial, name)))
							return []string{name}
						}
						pl.make(t, s, filepath.Join(partial, name))
						return []string{name}
					})
				})
			}
		}
		// A forged journal listing names outside the folder, with and without other plants.
		t.Run(c.name+"/forged journal", func(t *testing.T) {
			c.check(t, func(t *testing.T, s sentinel, partial string) []string {
				must(t, os.MkdirAll(partial, 0o700))
				j := ".ckpt-journal"
				if c.name == "hosts" {
					j = ".ckpt-host-1.journal"
				}
				must(t, os.WriteFile(filepath.Join(partial, j), []byte(forgedJournal(s)), 0o600))
				must(t, os.Link(s.file, filepath.Join(partial, "model.safetensors")))
				must(t, os.Symlink(s.dir, filepath.Join(partial, "outside-link")))
				return []string{j, "model.safetensors", "outside-link"}
			})
		})
		// The partial folder itself is something else.
		for _, pl := range plants {
			t.Run(c.name+"/partial folder is a "+pl.name, func(t *testing.T) {
				c.check(t, func(t *testing.T, s sentinel, partial string) []string {
					pl.make(t, s, partial)
					return []string{filepath.Base(partial)}
				})
			})
		}
		// The destination itself is something else (an earlier output's place taken).
		for _, pl := range plants {
			t.Run(c.name+"/destination is a "+pl.name, func(t *testing.T) {
				c.check(t, func(t *testing.T, s sentinel, partial string) []string {
					dst := filepath.Join(filepath.Dir(partial), c.dst)
					must(t, os.RemoveAll(dst))
					pl.make(t, s, dst)
					return []string{c.dst}
				})
			})
		}
		// Something where a replaced output is moved aside.
		if c.before != nil && c.dst == "out" {
			for _, pl := range plants {
				t.Run(c.name+"/"+c.partial+".old is a "+pl.name, func(t *testing.T) {
					c.check(t, func(t *testing.T, s sentinel, partial string) []string {
						pl.make(t, s, partial+".old")
						return []string{filepath.Base(partial) + ".old"}
					})
				})
			}
		}
	}
}

// check runs the case with plants made by plantAll and asserts the invariants.
func (c hostileCase) check(t *testing.T, plantAll func(t *testing.T, s sentinel, partial string) []string) {
	t.Helper()
	base := t.TempDir()
	s := newSentinel(t, base)
	if c.before != nil {
		c.before(t, base)
	}
	partial := filepath.Join(base, c.partial)
	names := plantAll(t, s, partial)
	outsideBefore := state(t, s.root)
	// Every planted entry, described where it was planted.
	planted := map[string]map[string]string{}
	for _, n := range names {
		p := filepath.Join(partial, n)
		if n == filepath.Base(partial) || strings.HasSuffix(n, ".old") || n == c.dst {
			p = filepath.Join(base, n)
		}
		planted[p] = describe(t, p)
	}
	err := timeout(t, c.name, unblockFIFOs(base), func() error { return c.run(t, base, nil) })
	sameState(t, "the tree outside the output", outsideBefore, state(t, s.root))
	for p, before := range planted {
		// The hosts of a multi-host conversion join a partial folder already there (another
		// host's): they may add their own files to a planted one, never touch its own.
		sameStateAdding(t, "the planted "+p, before, describe(t, p), c.name == "hosts" && p == partial)
	}
	dst := filepath.Join(base, c.dst)
	if err == nil {
		rep, cerr := verify.Check(context.Background(), dst, "")
		if cerr != nil || !rep.OK() {
			t.Errorf("succeeded, but the output is not complete: %v %+v", cerr, rep)
		}
		return
	}
	msg := err.Error()
	named := strings.Contains(msg, c.partial)
	for _, n := range names {
		named = named || strings.Contains(msg, n)
	}
	if !named {
		t.Errorf("refused without naming what is in the way: %v", err)
	}
}

// describe is the state of the entry at p and, for a folder, of what it holds.
func describe(t *testing.T, p string) map[string]string {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		return map[string]string{".": "missing"}
	}
	if st.IsDir() {
		return state(t, p)
	}
	out := map[string]string{}
	ino := st.Sys().(*syscall.Stat_t).Ino
	desc := fmt.Sprintf("%v ino=%d nlink=%d", st.Mode(), ino, st.Sys().(*syscall.Stat_t).Nlink)
	if st.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(p)
		desc += " -> " + target
	} else if st.Mode().IsRegular() {
		b, _ := os.ReadFile(p)
		desc += " " + string(bytes.TrimSpace(b))
	}
	out["."] = desc
	return out
}

// TestPlantedWhileWriting plants each kind of entry in the partial folder while a
// conversion writes it — beside its files, and in place of a file it made — then
// interrupts it: what the interrupted run removes is only what it made.
func TestPlantedWhileWriting(t *testing.T) {
	for _, out := range []struct {
		name, dst string
		format    formats.Layout
		src       string
	}{
		{"folder", "out", formats.SafetensorsFile, hfSource},
		{"file", "out.pt", formats.TorchFile, "../testdata/torch/training_cuda.pt"},
	} {
		for _, replace := range []bool{false, true} {
			for _, pl := range plants {
				t.Run(fmt.Sprintf("%s/replacing=%v/%s", out.name, replace, pl.name), func(t *testing.T) {
					base := t.TempDir()
					s := newSentinel(t, base)
					partial := filepath.Join(base, "."+out.dst+".partial")
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					var planted map[string]map[string]string
					var outsideBefore map[string]string
					o := DefaultOptions(out.src, filepath.Join(base, out.dst))
					o.Format, o.ToolVersion = out.format, "test"
					o.Progress = func(done, total int64) {
						if planted != nil {
							return
						}
						name := "planted"
						if replace {
							es, _ := os.ReadDir(partial)
							for _, e := range es {
								if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".ckpt") {
									name = e.Name()
									os.Remove(filepath.Join(partial, name))
									break
								}
							}
						}
						pl.make(t, s, filepath.Join(partial, name))
						outsideBefore = state(t, s.root)
						planted = map[string]map[string]string{filepath.Join(partial, name): describe(t, filepath.Join(partial, name))}
						cancel()
					}
					_, err := timeout(t, "interrupted run", unblockFIFOs(base), func() error {
						_, err := Run(ctx, o)
						return err
					}), error(nil)
					if planted == nil {
						t.Fatalf("nothing was planted (the run reported no progress): %v", err)
					}
					sameState(t, "the tree outside the output", outsideBefore, state(t, s.root))
					for p, before := range planted {
						sameState(t, "the planted "+p, before, describe(t, p))
					}
					if _, err := os.Lstat(filepath.Join(base, out.dst)); !os.IsNotExist(err) {
						t.Errorf("an interrupted run left %s in place", out.dst)
					}
					// What the run made is gone: the partial folder holds the plant alone.
					if es, _ := os.ReadDir(partial); len(es) != 1 {
						var names []string
						for _, e := range es {
							names = append(names, e.Name())
						}
						t.Errorf("the interrupted run left %v beside the plant", names)
					}
				})
			}
		}
	}
}
