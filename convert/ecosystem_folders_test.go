package convert_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

const folders = "../testdata/ecosystem/folders"

// folderFixtures is testdata/ecosystem/folders.json.
type folderFixtures struct {
	Trainer  map[string]orderedListing `json:"trainer"`
	PEFT     map[string]orderedListing `json:"peft"`
	Pipeline map[string]struct {
		File     string            `json:"file"`
		Tensors  orderedListing    `json:"tensors"`
		Metadata map[string]string `json:"metadata"`
	} `json:"pipeline"`
	Kohya struct {
		Tensors  orderedListing    `json:"tensors"`
		Metadata map[string]string `json:"metadata"`
	} `json:"lora_kohya.safetensors"`
}

func loadFolderFixtures(t *testing.T) *folderFixtures {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/folders.json")
	if err != nil {
		t.Fatal(err)
	}
	var f folderFixtures
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Trainer) != 4 || len(f.Pipeline) != 3 || len(f.PEFT) != 1 {
		t.Fatalf("fixtures incomplete: %+v", f)
	}
	return &f
}

// sameTensors reports every tensor of want missing from got or different in it, names
// mapped by prefix.
func sameTensors(t *testing.T, got map[string]torchEntry, want orderedListing, prefix string) {
	t.Helper()
	for _, n := range want.Names {
		g, ok := got[statedict.JoinName(prefix, n)]
		if !ok {
			t.Errorf("%s missing", statedict.JoinName(prefix, n))
		} else if !reflect.DeepEqual(g, want.Entries[n]) {
			t.Errorf("%s: %+v, the source has %+v", statedict.JoinName(prefix, n), g, want.Entries[n])
		}
	}
}

// TestTrainerFolderEveryFormat converts a checkpoint-N folder written by a real
// transformers Trainer to every output format: the training state is never silently left
// out — converted alongside in a folder output (Hugging Face or DCP), inside a torch file
// under the files' stems next to "model", and a safetensors file, which cannot hold it,
// says so with a data-loss warning (an error under Strict). Every output loads in torch
// with every tensor bit-identical to the Trainer's files.
func TestTrainerFolderEveryFormat(t *testing.T) {
	o := oracle.Require(t)
	fx := loadFolderFixtures(t)
	host, chroot := oracle.TempDir(t)
	src := filepath.Join(folders, "trainer", "checkpoint-2")
	run := func(dst string, format formats.Layout) *convert.Summary {
		t.Helper()
		sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: format, Plan: plan.Options{PlainData: true}})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
			t.Errorf("%s: check %+v, %v", format, rep, err)
		}
		return sum
	}
	hfOut, dcpOut, ptOut := filepath.Join(host, "hf"), filepath.Join(host, "dcp"), filepath.Join(host, "trainer.pt")
	run(hfOut, formats.SafetensorsFile)
	dsum := run(dcpOut, formats.DCPFolder)
	psum := run(ptOut, formats.TorchFile)
	if len(dsum.Alongside) != 3 {
		t.Errorf("DCP output: %d training-state files alongside, want 3", len(dsum.Alongside))
	}
	for _, w := range psum.Warnings {
		if w.Dropped && !reflect.DeepEqual(w.Items, []string{"training_args.bin"}) {
			t.Errorf("torch output dropped data: %s", w.Message)
		}
	}
	_, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: filepath.Join(host, "w.safetensors"), Format: formats.SafetensorsFile, Strict: true})
	if err == nil || !strings.Contains(err.Error(), "training state optimizer.pt, rng_state.pth, scheduler.pt") {
		t.Errorf("strict safetensors file: %v", err)
	}
	var jobs []ecosystemJob
	for _, dir := range []string{hfOut, dcpOut} {
		format := "safetensors"
		if dir == dcpOut {
			format = "dcp"
		}
		jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dir), Format: format})
		for _, f := range []string{"optimizer.pt", "scheduler.pt", "rng_state.pth"} {
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, filepath.Join(dir, f)), Format: "torch", WeightsOnly: true})
		}
	}
	jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, ptOut), Format: "torch", WeightsOnly: true})
	res := loadInTorch(t, o, host, jobs)
	for i, job := range jobs[:8] {
		if res[i].Error != "" {
			t.Fatalf("%s: %s", job.Out, res[i].Error)
		}
		name := filepath.Base(job.Out)
		if job.Format != "torch" {
			name = "model.safetensors"
		}
		sameTensors(t, res[i].Tensors, fx.Trainer[name], "")
	}
	last := res[len(res)-1]
	if last.Error != "" {
		t.Fatal(last.Error)
	}
	sameTensors(t, last.Tensors, fx.Trainer["model.safetensors"], "model")
	sameTensors(t, last.Tensors, fx.Trainer["optimizer.pt"], "optimizer")
	sameTensors(t, last.Tensors, fx.Trainer["scheduler.pt"], "scheduler")
	sameTensors(t, last.Tensors, fx.Trainer["rng_state.pth"], "rng_state")
}

// TestPEFTAdapterFolder converts a PEFT adapter folder as a folder: adapter_model.safetensors
// (the name PEFT loads) with its metadata, adapter_config.json and the model card carried,
// every tensor bit-identical in torch.
func TestPEFTAdapterFolder(t *testing.T) {
	o := oracle.Require(t)
	fx := loadFolderFixtures(t)
	host, chroot := oracle.TempDir(t)
	dst := filepath.Join(host, "out")
	sum, err := convert.Run(t.Context(), convert.Options{Src: filepath.Join(folders, "peft"), Dst: dst, Format: formats.SafetensorsFile})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"adapter_model.safetensors", "README.md", "adapter_config.json"}; !sameSet(sum.Files, want) {
		t.Errorf("files %v, want %v", sum.Files, want)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "adapter_config.json"))
	src, _ := os.ReadFile(filepath.Join(folders, "peft", "adapter_config.json"))
	if string(b) != string(src) {
		t.Error("adapter_config.json changed")
	}
	res := loadInTorch(t, o, host, []ecosystemJob{{Out: chrootPath(host, chroot, filepath.Join(dst, "adapter_model.safetensors")), Format: "safetensors"}})
	if res[0].Error != "" {
		t.Fatal(res[0].Error)
	}
	sameTensors(t, res[0].Tensors, fx.PEFT["adapter_model.safetensors"], "")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestDiffusersPipeline reads a diffusers pipeline root as its components: inspect lists
// every component's tensors under its name, and a conversion writes a folder of components
// (safetensors under the names diffusers and transformers load, or a DCP folder each) with
// model_index.json and every configuration carried, a cast rewriting the dtype of the
// configs that name one. Every component loads in torch bit-identical (after torch's cast).
func TestDiffusersPipeline(t *testing.T) {
	o := oracle.Require(t)
	fx := loadFolderFixtures(t)
	src := filepath.Join(folders, "pipeline")
	ck, err := formats.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]torchEntry{}
	for _, tn := range rep.Tensors {
		got[tn.Name] = torchEntry{DType: tn.DType, Shape: tn.Shape, SHA256: tn.SHA256}
	}
	total := 0
	for comp, c := range fx.Pipeline {
		sameTensors(t, got, c.Tensors, comp)
		total += len(c.Tensors.Names)
	}
	if len(rep.Tensors) != total {
		t.Errorf("inspect lists %d tensors, the components hold %d", len(rep.Tensors), total)
	}
	host, chroot := oracle.TempDir(t)
	comps := make([]string, 0, len(fx.Pipeline))
	for comp := range fx.Pipeline {
		comps = append(comps, comp)
	}
	slices.Sort(comps)
	var jobs []ecosystemJob
	for _, format := range []formats.Layout{formats.SafetensorsFile, formats.DCPFolder} {
		dst := filepath.Join(host, string(format))
		if _, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: format}); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		for _, f := range []string{"model_index.json", "unet/config.json", "text_encoder/config.json", "scheduler/scheduler_config.json",
			"tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer/tokenizer_config.json"} {
			a, _ := os.ReadFile(filepath.Join(src, f))
			b, err := os.ReadFile(filepath.Join(dst, f))
			if err != nil || string(a) != string(b) {
				t.Errorf("%s: %s not carried as it was (%v)", format, f, err)
			}
		}
		if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
			t.Errorf("%s: check %+v, %v", format, rep, err)
		}
		for _, comp := range comps {
			c := fx.Pipeline[comp]
			out := filepath.Join(dst, comp)
			if format == formats.SafetensorsFile {
				out = filepath.Join(out, c.File)
				h := readHeader(t, out)
				if !reflect.DeepEqual(h, c.Metadata) {
					t.Errorf("%s metadata %v, the source has %v", out, h, c.Metadata)
				}
			}
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, out), Format: string(format)})
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, job := range jobs {
		if res[i].Error != "" {
			t.Fatalf("%s: %s", job.Out, res[i].Error)
		}
		sameTensors(t, res[i].Tensors, fx.Pipeline[comps[i%len(comps)]].Tensors, "")
	}
	// A cast rewrites the dtype of the configs that name one (the text encoder's).
	dst := filepath.Join(host, "bf16")
	sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, Plan: plan.Options{DType: statedict.BFloat16}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "text_encoder", "config.json"))
	if !strings.Contains(string(b), `"bfloat16"`) || sum.ConfigDType == "" {
		t.Errorf("text_encoder/config.json not rewritten (%q): %s", sum.ConfigDType, b)
	}
}

func readHeader(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, err := safetensors.ReadHeader(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return h.Metadata
}

// TestSafetensorsMetadataKept: a safetensors file's __metadata__ (kohya training fields,
// modelspec, non-ASCII text) is preserved into safetensors outputs and recorded in the
// manifest of the others.
func TestSafetensorsMetadataKept(t *testing.T) {
	fx := loadFolderFixtures(t)
	src := filepath.Join(folders, "lora_kohya.safetensors")
	dir := t.TempDir()
	for _, format := range []formats.Layout{formats.SafetensorsFile, formats.TorchFile, formats.DCPFolder} {
		dst := filepath.Join(dir, "out-"+string(format))
		if format == formats.SafetensorsFile {
			dst += ".safetensors"
		}
		sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: format})
		if err != nil {
			t.Fatal(err)
		}
		if format == formats.SafetensorsFile {
			if h := readHeader(t, dst); !reflect.DeepEqual(h, fx.Kohya.Metadata) {
				t.Errorf("metadata %v, the source has %v", h, fx.Kohya.Metadata)
			}
		}
		m, err := manifest.Read(context.Background(), sum.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.Source.Metadata, fx.Kohya.Metadata) {
			t.Errorf("%s: manifest metadata %v", format, m.Source.Metadata)
		}
	}
}
