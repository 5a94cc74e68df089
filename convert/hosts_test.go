package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// fileOutput is a statedict.Output writing one file.
type fileOutput string

func (f fileOutput) Create(string) (io.WriteCloser, error) { return os.Create(string(f)) }
func (f fileOutput) Name() string                          { return string(f) }

// trainingSource writes a torch.save file of a Llama-shaped model — vocabulary 61 and MLP
// width 44, which no mesh divides — with AdamW-like state (a 0-dim step and two moments
// per parameter) and param-group values, random bytes throughout.
func trainingSource(t *testing.T, path string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	tensor := func(dt statedict.DType, shape ...int64) *statedict.Tensor {
		n := int64(dt.Size())
		for _, s := range shape {
			n *= s
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return &statedict.Tensor{DType: dt, Shape: shape, Strides: statedict.ContiguousStrides(shape),
			Storage: statedict.NewMappedStorage(fmt.Sprint(r.Uint64()), "cuda:0", dt, b)}
	}
	model := statedict.NewDict("collections.OrderedDict")
	shapes := []struct {
		name  string
		shape []int64
	}{{"model.embed_tokens.weight", []int64{61, 16}}}
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		shapes = append(shapes, []struct {
			name  string
			shape []int64
		}{
			{p + "self_attn.q_proj.weight", []int64{16, 16}}, {p + "self_attn.k_proj.weight", []int64{8, 16}},
			{p + "self_attn.v_proj.weight", []int64{8, 16}}, {p + "self_attn.o_proj.weight", []int64{16, 16}},
			{p + "mlp.gate_proj.weight", []int64{44, 16}}, {p + "mlp.up_proj.weight", []int64{44, 16}},
			{p + "mlp.down_proj.weight", []int64{16, 44}}, {p + "input_layernorm.weight", []int64{16}},
		}...)
	}
	shapes = append(shapes, []struct {
		name  string
		shape []int64
	}{{"model.norm.weight", []int64{16}}, {"lm_head.weight", []int64{61, 16}}}...)
	state := statedict.NewDict("")
	var ids []statedict.Value
	for i, s := range shapes {
		model.Set(s.name, tensor(statedict.BFloat16, s.shape...))
		st := statedict.NewDict("")
		step := tensor(statedict.Float32)
		step.Storage.Location = "cpu"
		st.Set("step", step)
		st.Set("exp_avg", tensor(statedict.Float32, s.shape...))
		st.Set("exp_avg_sq", tensor(statedict.Float32, s.shape...))
		state.Set(int64(i), st)
		ids = append(ids, int64(i))
	}
	group := statedict.NewDict("")
	group.Set("lr", 0.01)
	group.Set("betas", statedict.Tuple{0.9, 0.999})
	group.Set("weight_decay", 0.01)
	group.Set("params", &statedict.List{Items: ids})
	optim := statedict.NewDict("")
	optim.Set("state", state)
	optim.Set("param_groups", &statedict.List{Items: []statedict.Value{group}})
	root := statedict.NewDict("")
	root.Set("model", model)
	root.Set("optim", optim)
	if _, err := torchzip.WriteCheckpoint(fileOutput(path), &statedict.Checkpoint{Root: root}, statedict.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readLog records the byte ranges read from each source storage.
type readLog struct {
	mu     sync.Mutex
	ranges map[string][][2]int64 // storage key → [offset, end) read
}

// countingReader reads a storage through ReadAt, logging every range.
type countingReader struct {
	st  *statedict.Storage
	log *readLog
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.st.ReadAt(p, off)
	c.log.mu.Lock()
	c.log.ranges[c.st.Key] = append(c.log.ranges[c.st.Key], [2]int64{off, off + int64(n)})
	c.log.mu.Unlock()
	return n, err
}

// openCounting opens a checkpoint whose every storage reads through a countingReader, so
// that no byte can be read without being logged (no mapping, no file ranges).
func openCounting(log *readLog) func(context.Context, string, formats.OpenOptions) (*statedict.Checkpoint, error) {
	return func(ctx context.Context, path string, o formats.OpenOptions) (*statedict.Checkpoint, error) {
		ck, err := formats.OpenWith(ctx, path, o)
		if err != nil {
			return nil, err
		}
		wrapped := map[*statedict.Storage]*statedict.Storage{}
		err = statedict.Walk(ck.Root, "", func(_ string, v statedict.Value) error {
			t, ok := v.(*statedict.Tensor)
			if !ok || t.Storage == nil {
				return nil
			}
			w, ok := wrapped[t.Storage]
			if !ok {
				st := t.Storage
				w = statedict.NewReaderStorage(st.Key, st.Location, st.DType, &countingReader{st, log}, 0, st.Size)
				wrapped[st] = w
			}
			t.Storage = w
			return nil
		})
		return ck, err
	}
}

// hostsFixture is the source of a multi-host test — the training checkpoint, in a folder
// of the test's own — and the target of its conversions.
type hostsFixture struct {
	dir, src string
	target   *runtime.Target
}

// newHostsFixture writes the source and makes the target: device with the mesh ms.
func newHostsFixture(t *testing.T, device, ms string) *hostsFixture {
	t.Helper()
	dir := t.TempDir()
	f := &hostsFixture{dir: dir, src: filepath.Join(dir, "train.pt")}
	trainingSource(t, f.src)
	var err error
	if f.target, err = runtime.NewTarget(runtime.Spec{Device: device, Mesh: ms}); err != nil {
		t.Fatal(err)
	}
	return f
}

// options returns the options converting the source into dst in format as host host of
// hosts, a host waiting up to wait for host 0 to clear a bucket destination.
func (f *hostsFixture) options(format formats.Layout, wait time.Duration) func(dst string, host, hosts int) Options {
	return func(dst string, host, hosts int) Options {
		o := DefaultOptions(f.src, dst)
		o.Format, o.Target, o.ToolVersion = format, f.target, "test"
		o.Hosts = Hosts{Index: host, Count: hosts, Wait: wait}
		return o
	}
}

// single converts the source in one process into the folder name of f.dir, the output the
// hosts' must equal, and returns its path.
func (f *hostsFixture) single(t *testing.T, name string, options func(dst string, host, hosts int) Options) string {
	t.Helper()
	dst := filepath.Join(f.dir, name)
	if _, err := Run(context.Background(), options(dst, 0, 1)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// fileNames lists the names in dir, sorted.
func fileNames(dir string) []string {
	es, _ := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// runLogged runs host h's conversion opts reading the source through a log of its own,
// logs[h].
func runLogged(t *testing.T, logs []*readLog, h int, opts Options) *Summary {
	t.Helper()
	defer func(f func(context.Context, string, formats.OpenOptions) (*statedict.Checkpoint, error)) {
		openSource = f
	}(openSource)
	logs[h] = &readLog{ranges: map[string][][2]int64{}}
	openSource = openCounting(logs[h])
	sum, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("host %d: %v", h, err)
	}
	return sum
}

// TestMultiHost converts a training checkpoint for 8 ranks (mesh tp=2,fsdp=4) as 4 hosts,
// each reading the source through a logging reader, and checks that the output is exactly
// the files one process writes, that it passes ckpt check, and that each host read from the
// source exactly the bytes of the pieces its ranks' files hold — no range of a tensor it
// does not write. Half-finished, the output does not exist; a host run again once it is
// complete has nothing to do; a host of another conversion is refused.
func TestMultiHost(t *testing.T) {
	f := newHostsFixture(t, "cpu", "tp=2,fsdp=4")
	dir, options := f.dir, f.options(formats.DCPFolder, 0)
	single := f.single(t, "single", options)

	multi := filepath.Join(dir, "multi")
	logs := make([]*readLog, 4)
	for _, h := range []int{3, 1, 2, 0} { // host 0 last: it finishes the output
		if h == 0 {
			if _, err := os.Stat(multi); !os.IsNotExist(err) {
				t.Fatal("the output exists before host 0 finished it")
			}
			if _, err := verify.Check(context.Background(), multi, ""); err == nil {
				t.Fatal("ckpt check passes a half-finished output")
			}
			if _, err := verify.Check(context.Background(), partialOf(multi), ""); err == nil {
				t.Fatal("ckpt check passes the partial folder")
			}
			// Host 0 of another conversion (float16 moments) refuses the others' shares.
			o := options(multi, 0, 4)
			o.Plan.OptimizerDType = statedict.Float16
			o.Hosts.Wait = 1
			if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "another conversion") {
				t.Fatalf("host 0 of another conversion: %v", err)
			}
			// (Its share stays sealed; the right host 0 replaces it.)
		}
		sum := runLogged(t, logs, h, options(multi, h, 4))
		if !sum.Host.Sealed || sum.Host.Finished != (h == 0) {
			t.Errorf("host %d: %+v", h, sum.Host)
		}
		if h == 0 && (len(sum.Warnings) != 1 || sum.Warnings[0].Kind != "partial_removed") {
			t.Errorf("host 0 replacing its share of another conversion: warnings %v", sum.Warnings)
		}
	}

	for _, f := range []string{"__0_0.distcp", "__5_0.distcp", "__7_0.distcp", dcp.MetadataFile} {
		a, _ := os.ReadFile(filepath.Join(single, f))
		b, err := os.ReadFile(filepath.Join(multi, f))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between one process and 4 hosts (%v)", f, err)
		}
	}
	if a, b := fileNames(single), fileNames(multi); !slices.Equal(a, b) {
		t.Errorf("files %v, one process %v", b, a)
	}
	ms, _ := manifest.Read(context.Background(), filepath.Join(single, manifest.Name))
	mm, _ := manifest.Read(context.Background(), filepath.Join(multi, manifest.Name))
	if fmt.Sprint(ms.Tensors) != fmt.Sprint(mm.Tensors) || mm.Output.Run == "" {
		t.Errorf("manifests differ:\n%v\n%v", ms.Tensors, mm.Tensors)
	}
	rep, err := verify.Check(context.Background(), multi, "")
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %+v", err, rep)
	}

	// What each host read, against the pieces its ranks' files hold.
	ck, err := formats.Open(context.Background(), f.src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	b, _ := os.ReadFile(filepath.Join(multi, dcp.MetadataFile))
	md, err := dcp.ReadMetadata(b, dcp.MetadataFile)
	if err != nil {
		t.Fatal(err)
	}
	for h := range 4 {
		want := map[string][][2]int64{}
		for _, e := range md.Storage {
			var r int
			fmt.Sscanf(e.RelativePath, "__%d_0.distcp", &r)
			if r/2 != h || e.Offsets == nil {
				continue
			}
			x, err := ck.Tensor(e.FQN)
			if err != nil {
				t.Fatal(err)
			}
			item, _ := md.Item(e.FQN)
			var sizes []int64
			for _, c := range item.Tensor.Chunks {
				if slices.Equal(c.Offsets, e.Offsets) {
					sizes = c.Sizes
				}
			}
			es := int64(x.DType.Size())
			for br := range (runtime.Chunk{Offsets: e.Offsets, Sizes: sizes}).ByteRanges(x.Shape, x.Strides, x.Offset, es) {
				want[x.Storage.Key] = append(want[x.Storage.Key], [2]int64{br.Offset, br.Offset + br.Length})
			}
		}
		got := logs[h].ranges
		var wantBytes, gotBytes int64
		for key, rs := range want {
			wantBytes += covered(rs)
			if !slices.Equal(merge(got[key]), merge(rs)) {
				t.Errorf("host %d read %v of storage %s, its files hold %v", h, merge(got[key]), key, merge(rs))
			}
		}
		for key, rs := range got {
			gotBytes += covered(rs)
			if _, ok := want[key]; !ok {
				t.Errorf("host %d read %v of storage %s, of which it writes nothing", h, merge(rs), key)
			}
		}
		if wantBytes == 0 || gotBytes != wantBytes {
			t.Errorf("host %d read %d source bytes, its pieces hold %d", h, gotBytes, wantBytes)
		}
		t.Logf("host %d read %d bytes of %d storages", h, gotBytes, len(got))
	}

	// Run again once complete: nothing to do.
	sum, err := Run(context.Background(), options(multi, 2, 4))
	if err != nil || !sum.Host.AlreadyDone {
		t.Fatalf("host 2 again: %v %+v", err, sum)
	}
}

// partialOf is where a folder output is written until complete.
func partialOf(dst string) string {
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".partial")
}

// merge sorts ranges and merges those that touch or overlap.
func merge(rs [][2]int64) [][2]int64 {
	rs = slices.Clone(rs)
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	var out [][2]int64
	for _, r := range rs {
		if r[1] <= r[0] {
			continue
		}
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// covered is the number of bytes the ranges cover, each once.
func covered(rs [][2]int64) int64 {
	var n int64
	for _, r := range merge(rs) {
		n += r[1] - r[0]
	}
	return n
}

// TestMultiHostSafetensors: the same for a per-device safetensors folder, whose rank files
// each hold every piece their rank holds (replicated tensors in every file): 4 hosts write
// one process's files, and each reads from the source exactly the pieces its ranks hold.
func TestMultiHostSafetensors(t *testing.T) {
	f := newHostsFixture(t, "tpu", "fsdp=2,tp=4")
	options := f.options(formats.SafetensorsFile, 0)
	single := f.single(t, "single", options)
	multi := filepath.Join(f.dir, "multi")
	logs := make([]*readLog, 4)
	for _, h := range []int{2, 3, 1, 0} {
		runLogged(t, logs, h, options(multi, h, 4))
	}
	es, _ := os.ReadDir(single)
	if len(es) != 10 {
		t.Fatalf("one process wrote %d files", len(es))
	}
	for _, e := range es {
		if e.Name() == manifest.Name {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(single, e.Name()))
		b, err := os.ReadFile(filepath.Join(multi, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between one process and 4 hosts (%v)", e.Name(), err)
		}
	}
	if rep, err := verify.Check(context.Background(), multi, ""); err != nil || !rep.OK() {
		t.Fatalf("check: %v %+v", err, rep)
	}
	ck, err := formats.Open(context.Background(), f.src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	b, _ := os.ReadFile(filepath.Join(multi, "sharding.json"))
	var man struct {
		Tensors []struct {
			Name   string
			Pieces []statedict.Piece
		}
	}
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	for h := range 4 {
		want := map[string][][2]int64{}
		for _, st := range man.Tensors {
			x, err := ck.Tensor(st.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, pc := range st.Pieces {
				if !slices.ContainsFunc(pc.Ranks, func(r int) bool { return r/2 == h }) {
					continue
				}
				for br := range (runtime.Chunk{Offsets: pc.Offsets, Sizes: pc.Sizes}).ByteRanges(x.Shape, x.Strides, x.Offset, int64(x.DType.Size())) {
					want[x.Storage.Key] = append(want[x.Storage.Key], [2]int64{br.Offset, br.Offset + br.Length})
				}
			}
		}
		got := logs[h].ranges
		if len(got) != len(want) {
			t.Errorf("host %d read %d storages, its pieces are in %d", h, len(got), len(want))
		}
		for key, rs := range want {
			if !slices.Equal(merge(got[key]), merge(rs)) {
				t.Errorf("host %d read %v of storage %s, its files hold %v", h, merge(got[key]), key, merge(rs))
			}
		}
	}
}
