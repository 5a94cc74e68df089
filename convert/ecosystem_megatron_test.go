package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/verify"
)

const megatronDir = "../testdata/ecosystem/megatron/"

// megatronFixture is one checkpoint of testdata/ecosystem/megatron.json: the listing of what
// Megatron's (or NeMo's) own loader gives, and its io.BytesIO entries.
type megatronFixture struct {
	Tensors orderedListing    `json:"tensors"`
	Bytes   map[string]string `json:"bytes"`
}

// megatronSources are the fixtures, with the format each reads as.
var megatronSources = map[string]string{
	"legacy": "megatron", "torch_dist": "megatron-torch-dist", "nemo2": "nemo2",
	"nemo1/model.nemo": "nemo", "nemo1/tp2.nemo": "nemo",
}

func megatronFixtures(t *testing.T) map[string]megatronFixture {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/megatron.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	out := map[string]megatronFixture{}
	for name := range megatronSources {
		var f megatronFixture
		if err := json.Unmarshal(raw[name], &f); err != nil || len(f.Tensors.Names) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = f
	}
	return out
}

// TestMegatronInspect lists Megatron-LM save folders (one rank; torch_dist), a NeMo 2
// checkpoint and NeMo 1 archives (read in place) exactly as the libraries' own loaders give
// them: same names in the same order, dtypes, shapes and bytes. (Tensor × pipeline parallel
// saves merge into one model: formats/megatron's TestMergeFixtures.)
func TestMegatronInspect(t *testing.T) {
	for name, want := range megatronFixtures(t) {
		ck, err := formats.Open(context.Background(), megatronDir+name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ck.Format != megatronSources[name] {
			t.Errorf("%s read as %s", name, ck.Format)
		}
		rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
		ck.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, tn := range rep.Tensors {
			got = append(got, tn.Name)
			if g, w := (torchEntry{tn.DType, tn.Shape, tn.SHA256}), want.Tensors.Entries[tn.Name]; !reflect.DeepEqual(g, w) {
				t.Errorf("%s %s: %+v, the library's loader gives %+v", name, tn.Name, g, w)
			}
		}
		if !reflect.DeepEqual(got, want.Tensors.Names) {
			t.Errorf("%s: %v\nthe library's loader gives %v", name, got, want.Tensors.Names)
		}
	}
}

// TestMegatronLayoutFiles: a merged save reads every rank's model_optim_rng.pt and
// distrib_optim.pt and lists the rank folders' other files as ignored (convert says it left
// them out); a NeMo 2 checkpoint carries context/, a .nemo archive its config, both read
// through the checkpoint's files.
func TestMegatronLayoutFiles(t *testing.T) {
	for _, c := range []struct {
		src             string
		ignored, extras []string
	}{
		{"llama_tp2pp2", nil, nil},
		{"llama_tp2pp2+", []string{"iter_0000003/mp_rank_01_000/dataloader_state.pt"}, nil},
		{"nemo2", nil, []string{"context/io.json", "context/model.yaml"}},
		{"nemo1/tp2.nemo", nil, []string{"model_config.yaml"}},
	} {
		src := megatronDir + c.src
		if strings.HasSuffix(c.src, "+") { // a file beside a rank's
			src = filepath.Join(t.TempDir(), "ck")
			if err := os.CopyFS(src, os.DirFS(megatronDir+strings.TrimSuffix(c.src, "+"))); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, c.ignored[0]), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ck, err := formats.Open(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ck.Ignored, c.ignored) || !reflect.DeepEqual(ck.Extras, c.extras) {
			t.Errorf("%s: ignored %v extras %v, want %v %v", c.src, ck.Ignored, ck.Extras, c.ignored, c.extras)
		}
		for _, e := range ck.Extras {
			b, err := ck.ReadFile(e)
			want, _ := os.ReadFile(megatronDir + "nemo2/" + e)
			if e == "model_config.yaml" {
				want = []byte("tensor_model_parallel_size: 2")
			}
			if err != nil || !strings.Contains(string(b), string(want)) {
				t.Errorf("%s %s: %q %v", c.src, e, b, err)
			}
		}
		ck.Close()
	}
}

// TestMegatronRefusals: broken layouts are refused naming the file and what is wrong.
func TestMegatronRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/latest_checkpointed_iteration.txt", "300\n")
	os.MkdirAll(filepath.Join(dir, "a/iter_0000100"), 0o755)
	write("b/latest_checkpointed_iteration.txt", "latest")
	os.MkdirAll(filepath.Join(dir, "c/mp_rank_00"), 0o755)
	write("c/mp_rank_00/distrib_optim.pt", "x")
	gz, _ := os.ReadFile(megatronDir + "nemo1/model_gz.nemo")
	write("d.nemo", string(gz))
	for _, c := range []struct {
		src  string
		kind error
		says []string
	}{
		{"a", ckpterr.ErrCorrupt, []string{"latest_checkpointed_iteration.txt names iter_0000300", "iter_0000100"}},
		{"b", ckpterr.ErrCorrupt, []string{"holds 6 bytes", "not an iteration number"}},
		{"c", ckpterr.ErrCorrupt, []string{"mp_rank_00 has no model_optim_rng.pt"}},
		{"d.nemo", ckpterr.ErrUnsupported, []string{"gzip-compressed .nemo", "tar xzf"}},
	} {
		_, err := formats.Open(context.Background(), filepath.Join(dir, c.src))
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", c.src, err, c.kind)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v does not say %q", c.src, err, s)
			}
		}
	}
}

// TestMegatronConvertLoadsInTorch converts every Megatron and NeMo fixture to a torch file,
// a safetensors file and a DCP folder; torch loads each with every tensor bit-identical to
// what the library's own loader gives, and the torch and DCP outputs keep the Transformer
// Engine extra-state bytes. Folder outputs carry a NeMo checkpoint's configuration.
func TestMegatronConvertLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	fx := megatronFixtures(t)
	host, chroot := oracle.TempDir(t)
	type run struct{ src, format string }
	var runs []run
	var jobs []ecosystemJob
	for name := range fx {
		for _, format := range []formats.Layout{formats.TorchFile, formats.SafetensorsFile, formats.DCPFolder} {
			dst := filepath.Join(host, strings.NewReplacer("/", "_", ".", "_").Replace(name)+"-"+string(format))
			switch format {
			case formats.TorchFile:
				dst += ".pt"
			case formats.SafetensorsFile:
				dst += ".safetensors"
			}
			_, err := convert.Run(t.Context(), convert.Options{Src: megatronDir + name, Dst: dst, Format: format,
				Plan: plan.Options{PlainData: true, KeepCUDARNG: true}})
			if err != nil {
				t.Fatalf("%s → %s: %v", name, format, err)
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Errorf("%s → %s: check %+v %v", name, format, rep, err)
			}
			if format == formats.DCPFolder && strings.HasPrefix(name, "nemo") {
				carried := "model_config.yaml"
				if name == "nemo2" {
					carried = "context/model.yaml"
				}
				if _, err := os.Stat(filepath.Join(dst, carried)); err != nil {
					t.Errorf("%s → dcp: %s not carried: %v", name, carried, err)
				}
			}
			runs = append(runs, run{name, string(format)})
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: string(format)})
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, r := range runs {
		t.Run(r.src+"/"+r.format, func(t *testing.T) {
			if res[i].Error != "" {
				t.Fatal(res[i].Error)
			}
			want := fx[r.src]
			sameTensors(t, res[i].Tensors, want.Tensors, "")
			if r.format == "safetensors" {
				return
			}
			for k, v := range want.Bytes {
				if res[i].Bytes[k] != v {
					t.Errorf("bytes entry %s: %.40q, the source has %.40q", k, res[i].Bytes[k], v)
				}
			}
		})
	}
}

// TestMegatronDistCommonOutside: a torch_dist folder whose common.pt is a link leading
// outside the checkpoint is refused, naming the file, and nothing is read through it.
func TestMegatronDistCommonOutside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	if err := os.CopyFS(dir, os.DirFS(megatronDir+"torch_dist")); err != nil {
		t.Fatal(err)
	}
	common := filepath.Join(dir, "iter_0000200", "common.pt")
	elsewhere := filepath.Join(t.TempDir(), "common.pt")
	if err := os.Rename(common, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, common); err != nil {
		t.Fatal(err)
	}
	_, err := formats.Open(context.Background(), dir)
	if !errors.Is(err, hf.ErrOutside) || !strings.Contains(err.Error(), "common.pt") {
		t.Fatalf("common.pt linked outside: %v, want hf.ErrOutside naming it", err)
	}
}

// TestMegatronParallelOnTPU converts the tensor × pipeline parallel Megatron saves (TP=2 ×
// PP=2, with and without the distributed optimizer) as `ckpt convert --to tpu --topology v5p-8 --format dcp`
// does: the merged model's weights and every parameter's fp32 main copy and Adam moments are
// split over the slice's 4 devices (each a piece of its own in its device's .distcp file,
// the moments cut as their parameter), the step counters whole; torch reassembles the
// folder to exactly the TP=1 model and optimizer state torch computed (megatron.json), and
// AdamW resumed from it with torch's own set_optimizer_state_dict steps exactly as the TP=1
// model's optimizer does (check_megatron_resume.py).
func TestMegatronParallelOnTPU(t *testing.T) {
	o := oracle.Require(t)
	b, err := os.ReadFile("../testdata/ecosystem/megatron.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	truth := map[string]struct {
		Tensors orderedListing `json:"tensors"`
	}{}
	for _, name := range []string{"llama", "gpt"} {
		v := truth[name]
		if err := json.Unmarshal(raw[name], &v); err != nil || len(v.Tensors.Names) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		truth[name] = v
	}
	host, chroot := oracle.TempDir(t)
	target, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU, Topology: "v5p-8"})
	if err != nil {
		t.Fatal(err)
	}
	srcs := []string{"llama_tp2pp2", "gpt_tp2pp2", "gpt_tp2pp2_nodist"}
	var names []string
	var jobs []ecosystemJob
	for _, src := range srcs {
		name := strings.Split(src, "_")[0]
		names = append(names, name)
		dst := filepath.Join(host, src)
		opts := convert.DefaultOptions(megatronDir+src, dst)
		opts.Format, opts.Target = formats.DCPFolder, target
		sum, err := convert.Run(t.Context(), opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		params := 0
		for _, n := range truth[name].Tensors.Names {
			if strings.HasPrefix(n, "model.") {
				params++
			}
		}
		if sum.Sharding == nil || sum.Sharding.Ranks != 4 || sum.Sharding.Sharded != 4*params {
			t.Errorf("%s: sharding %+v, want the %d weights and their fp32_param, exp_avg, exp_avg_sq over 4 ranks", name, sum.Sharding, params)
		}
		ck, err := formats.Open(context.Background(), dst)
		if err != nil {
			t.Fatal(err)
		}
		tensors, err := ck.Tensors()
		if err != nil {
			t.Fatal(err)
		}
		split := 0
		for _, x := range tensors {
			shards := ck.Shards[x.Tensor]
			sharded := strings.HasPrefix(x.Name, "model.") || strings.HasPrefix(x.Name, "optimizer.state.") && !strings.HasSuffix(x.Name, ".step")
			if !sharded {
				continue
			}
			owners, next := map[int]bool{}, int64(0)
			for _, s := range shards { // rank by rank, consecutive rows of the tensor
				if len(s.Ranks) == 1 && s.Offsets[0] == next {
					owners[s.Ranks[0]] = true
					next += s.Sizes[0]
				}
			}
			if len(shards) != 4 || len(owners) != 4 || next != x.Tensor.Shape[0] {
				t.Errorf("%s %s: %d pieces %+v, want one per device", name, x.Name, len(shards), shards)
			}
			split++
		}
		ck.Close()
		if split != 4*params {
			t.Errorf("%s: %d tensors split, want %d", name, split, 4*params)
		}
		jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: "dcp"})
	}
	for i, res := range loadInTorch(t, o, host, jobs) {
		if res.Error != "" {
			t.Fatalf("%s: %s", names[i], res.Error)
		}
		sameTensors(t, res.Tensors, truth[names[i]].Tensors, "")
	}
	// Training resumes: torch's set_optimizer_state_dict takes the merged state, and two
	// more AdamW steps match the TP=1 model's own, bit for bit.
	args := []string{"testdata/ecosystem/check_megatron_resume.py"}
	for i, j := range jobs {
		args = append(args, names[i], j.Out)
	}
	out, err := o.Python(args...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(jobs) {
		t.Fatalf("%d results for %d conversions: %s", len(lines), len(jobs), out)
	}
	for i, l := range lines {
		var res struct {
			OK     bool     `json:"ok"`
			Errors []string `json:"errors"`
			Params int      `json:"params"`
		}
		if err := json.Unmarshal([]byte(l), &res); err != nil || !res.OK || res.Params == 0 {
			t.Errorf("%s: resuming: %s", srcs[i], l)
		}
	}
}
