package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/spf13/pflag"
)

// TestConvertMultiHostProcesses runs a per-device conversion as 4 hosts in 4 parallel
// processes (the host index from $JOB_COMPLETION_INDEX, as a Kubernetes Indexed Job sets
// it): the output is exactly the files one process writes and passes ckpt check. Run with
// host 0 missing, the output does not exist and nothing passes ckpt check; host 0 then
// finishes it; run again, a host has nothing to do.
func TestConvertMultiHostProcesses(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "big.safetensors")
	bigSource(t, src, 12, 100_003)
	args := func(dst string) []string {
		return []string{"convert", "--to", "tpu", "--topology", "v6e-8", "--format", "dcp", src, dst}
	}
	single := filepath.Join(dir, "single")
	if _, err := run(t, args(single)...); err != nil {
		t.Fatal(err)
	}
	hosts := func(dst string, which ...int) {
		t.Helper()
		var wg sync.WaitGroup
		outs := make([]string, 4)
		errs := make([]error, 4)
		for _, h := range which {
			wg.Go(func() {
				cmd := ckptCmd(append(args(dst), "--num-hosts", "4")...)
				cmd.Env = append(cmd.Env, fmt.Sprintf("JOB_COMPLETION_INDEX=%d", h))
				out, err := cmd.CombinedOutput()
				outs[h], errs[h] = string(out), err
			})
		}
		wg.Wait()
		for _, h := range which {
			if errs[h] != nil || !strings.Contains(outs[h], fmt.Sprintf("host %d of 4: wrote the files of ranks %d-%d", h, 2*h, 2*h+1)) {
				t.Fatalf("host %d: %v\n%s", h, errs[h], outs[h])
			}
		}
	}
	multi := filepath.Join(dir, "multi")
	hosts(multi, 0, 1, 2, 3)
	want := treeHashes(t, single)
	got := treeHashes(t, multi)
	if len(want) != 9 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("4 hosts wrote %v\none process %v", got, want)
	}
	if out, err := run(t, "check", multi); err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}

	half := filepath.Join(dir, "half")
	hosts(half, 1, 2, 3)
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Fatal("the output exists without host 0")
	}
	for _, p := range []string{half, filepath.Join(dir, ".half.partial")} {
		if _, err := run(t, "check", p); err == nil {
			t.Fatalf("ckpt check passes %s, half-finished", p)
		}
	}
	hosts(half, 0)
	if got := treeHashes(t, half); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("finished later, host 0 wrote %v", got)
	}
	cmd := ckptCmd(append(args(half), "--num-hosts", "4", "--host-index", "3")...)
	if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("already complete")) {
		t.Fatalf("host 3 again: %v\n%s", err, out)
	}
}

// TestShardFlags: the host index and count default from the environment of a multi-host
// job, and flags that need a mesh say so.
func TestShardFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		env   map[string]string
		host  convert.Hosts
		ranks int
		err   string
	}{
		{args: []string{"--mesh", "fsdp=8"}, ranks: 8},
		{args: []string{"--topology", "v5p-32"}, ranks: 16},
		{args: []string{"--topology", "v5p-32"}, env: map[string]string{"JOB_COMPLETION_INDEX": "2"}, host: convert.Hosts{Index: 2, Count: 4}, ranks: 16},
		{args: []string{"--mesh", "fsdp=8"}, env: map[string]string{"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b"}, host: convert.Hosts{Index: 1, Count: 2}, ranks: 8},
		{args: []string{"--mesh", "fsdp=8", "--num-hosts", "4"}, env: map[string]string{"JOB_COMPLETION_INDEX": "3"}, host: convert.Hosts{Index: 3, Count: 4}, ranks: 8},
		{args: []string{"--mesh", "fsdp=8", "--host-index", "1"}, env: map[string]string{"JOB_COMPLETION_INDEX": "3", "TPU_WORKER_HOSTNAMES": "a,b"}, host: convert.Hosts{Index: 1, Count: 2}, ranks: 8},
		{args: []string{"--mesh", "fsdp=8"}, env: map[string]string{"JOB_COMPLETION_INDEX": "3"}, err: "--num-hosts"},
		{args: []string{"--mesh", "fsdp=8"}, env: map[string]string{"JOB_COMPLETION_INDEX": "x"}, err: "not a host index"},
		{args: []string{"--num-hosts", "2"}, err: "needs --mesh"},
		{args: []string{"--mesh", "fsdp=8", "--host-index", "1"}, err: "--num-hosts"},
		{args: []string{"--topology", "v6e-8", "--mesh", "fsdp=4"}, err: "mesh fsdp=4 has 4 ranks"},
		{args: []string{}, env: map[string]string{"JOB_COMPLETION_INDEX": "3"}}, // not sharded: no hosts
	} {
		var s shardFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		s.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var opts convert.Options
		err := s.apply(fs, &opts, runtime.Spec{Device: "tpu"}, func(k string) string { return c.env[k] })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v %v: %v, want %q", c.args, c.env, err, c.err)
			}
			continue
		}
		if c.ranks > 0 {
			c.host.Wait = convert.DefaultHostWait
		}
		if err != nil || opts.Hosts != c.host || opts.Target.Ranks() != max(c.ranks, 1) {
			t.Errorf("%v %v: hosts %+v, %d ranks, %v; want %+v, %d", c.args, c.env, opts.Hosts, opts.Target.Ranks(), err, c.host, c.ranks)
		}
	}
}

// TestKillResumeHost kills host 1 of 2 with SIGKILL after it finished one of its 4 rank
// files, while host 0 has sealed its share and waits: host 1 run again with --resume keeps
// the finished file (and touches none of host 0's), and host 0 then finishes an output
// identical to one process's.
func TestKillResumeHost(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	bigSource(t, src, 16, 1<<20) // 64 MiB of float32
	args := func(dst string, extra ...string) []string {
		return append([]string{"convert", "--to", "tpu", "--mesh", "fsdp=8", "--format", "dcp", "--num-hosts", "2", src, dst}, extra...)
	}
	single := filepath.Join(dir, "single")
	if _, err := run(t, "convert", "--to", "tpu", "--mesh", "fsdp=8", "--format", "dcp", src, single); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "out")
	host0 := ckptCmd(args(dst, "--host-index", "0")...)
	var out0 bytes.Buffer
	host0.Stdout, host0.Stderr = &out0, &out0
	if err := host0.Start(); err != nil {
		t.Fatal(err)
	}
	host1 := ckptCmd(args(dst, "--host-index", "1")...)
	if err := host1.Start(); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, ".out.partial", ".ckpt-host-1.journal")
	killed := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		b, _ := os.ReadFile(journal)
		// A journal line per file created, and one with its digest once it is finished.
		finished4, started := false, 0
		for _, line := range bytes.Split(b, []byte("\n")) {
			done := bytes.Contains(line, []byte(`"xxhash64"`))
			finished4 = finished4 || done && bytes.Contains(line, []byte(`"file":"__4_0.distcp"`))
			if !done && bytes.Contains(line, []byte(`"file":`)) {
				started++
			}
		}
		if finished4 || started >= 2 {
			killed = host1.Process.Signal(syscall.SIGKILL) == nil
			break
		}
	}
	host1.Wait()
	if !killed {
		t.Fatal("host 1 was not killed midway")
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("the output exists with host 1 killed")
	}
	out, err := ckptCmd(args(dst, "--host-index", "1", "--resume")...).CombinedOutput()
	if err != nil {
		t.Fatalf("host 1 resumed: %v\n%s", err, out)
	}
	if err := host0.Wait(); err != nil {
		t.Fatalf("host 0: %v\n%s", err, out0.String())
	}
	if !strings.Contains(out0.String(), "every host finished") {
		t.Fatalf("host 0 did not finish:\n%s", out0.String())
	}
	if got, want := treeHashes(t, dst), treeHashes(t, single); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the kill: %v\none process: %v\nhost 1 resumed:\n%s", got, want, out)
	}
	t.Logf("host 1 resumed:\n%s", out)
}

// TestPerDeviceOutputsCarryConfig: a per-device output carries the source folder's
// config.json and generation_config.json byte for byte in both layouts — written by one
// host or by several — so forward runs on it with the source's logits (issue 28, item 2:
// the safetensors layout left them out).
func TestPerDeviceOutputsCarryConfig(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	logits := func(path string) string {
		out, err := run(t, "forward", "--json", "--tokens", "1,2,3", path)
		if err != nil {
			t.Fatalf("forward %s: %v", path, err)
		}
		var rep struct {
			Top1      []int     `json:"top1"`
			Top1Logit []float64 `json:"top1_logit"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Top1) != 3 {
			t.Fatalf("forward %s: %v\n%s", path, err, out)
		}
		return fmt.Sprint(rep.Top1, rep.Top1Logit)
	}
	want := logits(src)
	for _, format := range []string{"safetensors", "dcp"} {
		for _, hosts := range [][]string{nil, {"1", "0"}} {
			dst := filepath.Join(t.TempDir(), "out")
			args := []string{"convert", "-q", "--topology", "v5p-16", "--format", format, src, dst}
			if hosts == nil {
				if _, err := run(t, args...); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range hosts {
				if _, err := run(t, append(args, "--num-hosts", "2", "--host-index", h)...); err != nil {
					t.Fatalf("host %s: %v", h, err)
				}
			}
			for _, name := range []string{"config.json", "generation_config.json"} {
				a, _ := os.ReadFile(filepath.Join(src, name))
				b, err := os.ReadFile(filepath.Join(dst, name))
				if err != nil || !bytes.Equal(a, b) {
					t.Errorf("%s, %d hosts: %s: %v", format, len(hosts), name, err)
				}
			}
			if _, err := run(t, "check", dst); err != nil {
				t.Errorf("%s, %d hosts: check: %v", format, len(hosts), err)
			}
			if got := logits(dst); got != want {
				t.Errorf("%s, %d hosts: forward %s, source %s", format, len(hosts), got, want)
			}
		}
	}
}
