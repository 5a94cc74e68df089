package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/statedict"
)

// torchEntry is one tensor of torch's listing (testdata/ecosystem/common.py).
type torchEntry struct {
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	SHA256 string  `json:"sha256"`
}

// orderedListing keeps the order of a JSON object's keys: torch's listing order.
type orderedListing struct {
	Names   []string
	Entries map[string]torchEntry
}

func (l *orderedListing) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &l.Entries); err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		l.Names = append(l.Names, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// objectFixture is one file of testdata/ecosystem/objects.json.
type objectFixture struct {
	Tensors orderedListing             `json:"tensors"`
	Plain   map[string]json.RawMessage `json:"plain"`
}

func objectFixtures(t *testing.T) map[string]objectFixture {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/objects.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]objectFixture{}
	for name, r := range raw {
		if name == "torch" {
			continue
		}
		var f objectFixture
		if err := json.Unmarshal(r, &f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = f
	}
	if len(out) < 7 {
		t.Fatalf("only %d object fixtures", len(out))
	}
	return out
}

// TestObjectCheckpointsInspect lists every object-laden checkpoint (Lightning, omegaconf,
// fairseq, records, compiled and legacy pickled modules) exactly as torch lists it: the
// same tensors in the same order, with dtypes, shapes and the SHA-256 of their bytes.
func TestObjectCheckpointsInspect(t *testing.T) {
	for name, want := range objectFixtures(t) {
		t.Run(name, func(t *testing.T) {
			ck, err := formats.Open(context.Background(), "../testdata/ecosystem/objects/"+name)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tn := range rep.Tensors {
				got = append(got, tn.Name)
				w, ok := want.Tensors.Entries[tn.Name]
				if !ok {
					continue
				}
				if tn.DType != w.DType || fmt.Sprint(tn.Shape) != fmt.Sprint(w.Shape) || tn.SHA256 != w.SHA256 {
					t.Errorf("%s: %s %v %s, torch lists %s %v %s", tn.Name, tn.DType, tn.Shape, tn.SHA256, w.DType, w.Shape, w.SHA256)
				}
			}
			if !reflect.DeepEqual(got, want.Tensors.Names) {
				t.Errorf("tensors\n%v\ntorch lists\n%v", got, want.Tensors.Names)
			}
		})
	}
}

// ecosystemResult is what testdata/ecosystem/check.py reports for one output.
type ecosystemResult struct {
	Tensors map[string]torchEntry      `json:"tensors"`
	Plain   map[string]json.RawMessage `json:"plain"`
	Repr    map[string]string          `json:"repr"`
	Types   map[string]string          `json:"types"`
	Bytes   map[string]string          `json:"bytes"`
	Error   string                     `json:"error"`
}

// ecosystemJob is one output for testdata/ecosystem/check.py to load.
type ecosystemJob struct {
	Out         string   `json:"out"`
	Format      string   `json:"format"`
	WeightsOnly bool     `json:"weights_only"`
	Keys        []string `json:"keys"`
}

// loadInTorch has torch load every job's output in one oracle process.
func loadInTorch(t *testing.T, o *oracle.Oracle, host string, jobs []ecosystemJob) []ecosystemResult {
	t.Helper()
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(filepath.Join(host, "jobs.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(oracle.RepoRoot(), host)
	out, err := o.Python("testdata/ecosystem/check.py", "/repo/"+filepath.ToSlash(rel)+"/jobs.json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(jobs) {
		t.Fatalf("%d results for %d jobs:\n%s", len(lines), len(jobs), out)
	}
	res := make([]ecosystemResult, len(jobs))
	for i := range jobs {
		if err := json.Unmarshal([]byte(lines[i]), &res[i]); err != nil {
			t.Fatalf("%s: %v: %s", jobs[i].Out, err, lines[i])
		}
	}
	return res
}

// chrootPath is where the chroot sees a file of an oracle.TempDir.
func chrootPath(host, chroot, p string) string {
	rel, _ := filepath.Rel(host, p)
	return chroot + "/" + filepath.ToSlash(rel)
}

// TestObjectCheckpointsConvert converts every object-laden checkpoint to each output format
// as `ckpt convert` does and has torch load the result: every tensor bit-identical to
// torch's listing of the source; the Lightning, omegaconf and fairseq checkpoints load with
// torch.load(weights_only=True), their hyper-parameter objects become the plain data they
// hold (omegaconf values and interpolations as stored); records that are not plain data
// (a Fraction, a date) are pickled again exactly as the source had them, with a warning,
// and refused under WeightsOnly.
func TestObjectCheckpointsConvert(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	fixtures := objectFixtures(t)
	type run struct {
		name, format string
		sum          *convert.Summary
	}
	var runs []run
	var jobs []ecosystemJob
	for name, fx := range fixtures {
		for _, format := range []formats.Layout{formats.TorchFile, formats.SafetensorsFile, formats.DCPFolder} {
			dst := filepath.Join(host, strings.ReplaceAll(name, ".", "_")+"-"+string(format))
			if format != formats.DCPFolder {
				dst += map[formats.Layout]string{formats.TorchFile: ".pt", formats.SafetensorsFile: ".safetensors"}[format]
			}
			sum, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/objects/" + name, Dst: dst, Format: format,
				Plan: plan.Options{PlainData: true}})
			if err != nil {
				t.Fatalf("%s → %s: %v", name, format, err)
			}
			var keys []string
			for k := range fx.Plain {
				keys = append(keys, k)
			}
			keys = append(keys, "ratio", "started")
			runs = append(runs, run{name, string(format), sum})
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: string(format), WeightsOnly: name != "records.pt", Keys: keys})
		}
	}
	results := loadInTorch(t, o, host, jobs)
	for i, r := range runs {
		res, fx := results[i], fixtures[r.name]
		t.Run(r.name+"/"+r.format, func(t *testing.T) {
			if res.Error != "" {
				t.Fatalf("torch cannot load the output: %s", res.Error)
			}
			if len(res.Tensors) != len(fx.Tensors.Names) {
				t.Errorf("%d tensors, the source has %d", len(res.Tensors), len(fx.Tensors.Names))
			}
			for name, w := range fx.Tensors.Entries {
				g, ok := res.Tensors[name]
				if !ok {
					t.Errorf("%s missing", name)
				} else if !reflect.DeepEqual(g, w) {
					t.Errorf("%s: %+v, the source has %+v", name, g, w)
				}
			}
			if r.format == string(formats.SafetensorsFile) {
				return
			}
			for k, want := range fx.Plain {
				var a, b any
				json.Unmarshal(want, &a)
				json.Unmarshal(res.Plain[k], &b)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s = %s, want the plain data %s", k, res.Plain[k], want)
				}
				if got := res.Types[k]; got != "builtins.dict" && got != "builtins.str" {
					t.Errorf("%s is a %s, not plain data", k, got)
				}
			}
			if r.name == "records.pt" {
				if res.Repr["ratio"] != "Fraction(1, 3)" || res.Repr["started"] != "datetime.date(2024, 5, 17)" {
					t.Errorf("kept objects load as %v", res.Repr)
				}
				var kept *plan.Warning
				for i, w := range r.sum.Warnings {
					if w.Kind == "objects_kept" {
						kept = &r.sum.Warnings[i]
					}
				}
				if kept == nil || !reflect.DeepEqual(kept.Items, []string{"ratio: fractions.Fraction", "started: datetime.date"}) {
					t.Errorf("warnings %+v", r.sum.Warnings)
				}
			}
		})
	}
}

// TestWeightsOnlyRefusesObjects: with WeightsOnly, an object that is not plain data makes
// the conversion fail naming it, and nothing is written; a checkpoint whose objects are
// all data converts.
func TestWeightsOnlyRefusesObjects(t *testing.T) {
	for _, format := range []formats.Layout{formats.TorchFile, formats.DCPFolder} {
		dst := filepath.Join(t.TempDir(), "out")
		_, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/objects/records.pt", Dst: dst, Format: format,
			WeightsOnly: true, Plan: plan.Options{PlainData: true}})
		if err == nil || !strings.Contains(err.Error(), "ratio: fractions.Fraction cannot be loaded by torch.load(weights_only=True)") {
			t.Errorf("%s: %v", format, err)
		}
		if _, serr := os.Stat(dst); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: output left behind", format)
		}
		if _, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/objects/lightning_omegaconf.ckpt", Dst: dst, Format: format,
			WeightsOnly: true, Plan: plan.Options{PlainData: true}}); err != nil {
			t.Errorf("%s: %v", format, err)
		}
	}
}

// TestDangerousObjectNeverWritten: an object Python would run as known code is never
// pickled again, whatever the options.
func TestDangerousObjectNeverWritten(t *testing.T) {
	evil := &statedict.Object{Class: "posix.system", Call: statedict.CallReduce, Args: []statedict.Value{"echo pwned"}}
	root := statedict.NewDict("")
	root.Set("w", &statedict.Tensor{DType: statedict.Float32, Shape: []int64{1}, Strides: []int64{1}, Storage: statedict.NewMappedStorage("0", "cpu", statedict.Float32, make([]byte, 4))})
	root.Set("cb", evil)
	for _, lay := range []formats.Layout{formats.TorchFile, formats.DCPFolder} {
		out := &memOutput{files: map[string]*strings.Builder{}}
		_, err := lay.Writer()(out, &statedict.Checkpoint{Root: root}, statedict.WriteOptions{})
		if !errors.Is(err, ckpterr.ErrDangerous) || !strings.Contains(err.Error(), "cb") {
			t.Errorf("%s: %v", lay, err)
		}
	}
}

// memOutput is a statedict.Output held in memory.
type memOutput struct{ files map[string]*strings.Builder }

type memFile struct{ *strings.Builder }

func (memFile) Close() error { return nil }

func (m *memOutput) Create(name string) (io.WriteCloser, error) {
	b := &strings.Builder{}
	m.files[name] = b
	return memFile{b}, nil
}

func (m *memOutput) Name() string { return "mem.pt" }
