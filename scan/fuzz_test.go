package scan

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// scanSeeds adds the small real and hostile checkpoints to a scan fuzz target.
func scanSeeds(f *testing.F, add func(name string, b []byte)) {
	var paths []string
	for _, g := range []string{"../testdata/torch/*.pt", "../testdata/hostile/*", "../testdata/hostile/*/*", "../testdata/hostile/round3/*/*", "../testdata/dcp/*/*", "../testdata/dcp/*/.metadata"} {
		m, _ := filepath.Glob(g)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) > 64<<10 {
			continue
		}
		add(filepath.Base(p), b)
	}
}

// fileNames are the names a scanned file may have: the scanner treats some specially.
var fileNames = []string{"model.pt", "model.bin", ".metadata", "__0_0.distcp", "model.safetensors", "README.md", "model.nemo", "state.npy", "arrays.npz"}

// checkScan checks what every scan must keep: problems wrap the error family and point
// inside the file, findings point inside the file.
func checkScan(t *testing.T, res *Result, size int64) {
	for _, p := range res.Problems {
		if !errors.Is(p, ckpterr.ErrCorrupt) && !errors.Is(p, ckpterr.ErrUnsupported) {
			t.Fatalf("problem outside the error family: %v", p)
		}
		if p.Offset > size {
			t.Fatalf("problem past the end of the %d-byte file: %v", size, p)
		}
	}
	for _, f := range res.Refused() {
		if !f.Inflated && (f.Offset < 0 || f.Offset >= size) {
			t.Fatalf("finding outside the %d-byte file: %+v", size, f)
		}
		if !f.Class.Refused() {
			t.Fatalf("refused finding of class %v", f.Class)
		}
	}
}

// FuzzScan scans arbitrary files under the names the scanner treats specially: it must never
// panic, and what it reports must point inside the file.
func FuzzScan(f *testing.F) {
	scanSeeds(f, func(name string, b []byte) {
		for i, n := range fileNames {
			if filepath.Ext(n) == filepath.Ext(name) || n == name {
				f.Add(uint8(i), b)
			}
		}
		f.Add(uint8(1), b)
	})
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		p := filepath.Join(t.TempDir(), fileNames[int(kind)%len(fileNames)])
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := Scan(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		checkScan(t, res, int64(len(data)))
		if len(res.Pickles) == 0 && len(res.Problems) == 0 && len(res.Code) == 0 {
			if l := res.Files[0].Layout; l != layoutSafetensors && l != layoutNone && l != layoutNpy && l != layoutNpz {
				t.Fatalf("layout %q with no pickle and no problem", l)
			}
		}
	})
}

// FuzzConcatenated scans arbitrary bytes as a DCP data file whose items no .metadata
// locates: archives and pickles back to back, each archive's end found by its structure.
func FuzzConcatenated(f *testing.F) {
	scanSeeds(f, func(name string, b []byte) {
		if filepath.Ext(name) == ".distcp" || filepath.Ext(name) == ".pt" {
			f.Add(b)
			f.Add(append(append([]byte{}, b...), b...))
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &scanner{res: &Result{}, covered: map[string]bool{}}
		s.concatenated("__0_0.distcp", data)
		checkScan(t, s.res, int64(len(data)))
	})
}

// remoteZipMax is the largest archive FuzzRemoteZip scans.
const remoteZipMax = 4 << 10

// minimizeTime bounds the minimization of each new input (or failing one) of a fuzz
// target that calls minimizeBriefly.
const minimizeTime = "3s"

// minimizeBriefly sets -test.fuzzminimizetime to minimizeTime unless the command line set
// it; the coordinator reads it when the target calls f.Fuzz.
func minimizeBriefly() {
	set := false
	flag.Visit(func(fl *flag.Flag) { set = set || fl.Name == "test.fuzzminimizetime" })
	if !set {
		flag.Set("test.fuzzminimizetime", minimizeTime)
	}
}

// unmapped is a File that is not Mapped, as an object in object storage is not.
type unmapped struct{ *bytes.Reader }

func (u unmapped) Close() error { return nil }

// FuzzRemoteZip scans arbitrary archives read in ranges, as a zip object in a bucket is
// read, and in memory: the two scans must report the same.
//
// The fuzzer minimizes every input that finds new code, by default for up to a minute,
// and the minimizer tries every span of the input (quadratic in its length): on these
// archives each minimization took the whole minute, during which no exec is counted, so
// 2 minutes showed 46 execs. Inputs are kept small (remoteZipMax: every structure a
// remote scan reads, torch.save's smallest files among the seeds) and minimization is
// bounded to minimizeTime unless -test.fuzzminimizetime is given: thousands of execs a
// second, counted as they run.
func FuzzRemoteZip(f *testing.F) {
	minimizeBriefly()
	scanSeeds(f, func(name string, b []byte) {
		if bytes.HasPrefix(b, []byte(zipMagic)) && len(b) <= remoteZipMax {
			f.Add(b)
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > remoteZipMax {
			return
		}
		mem := &scanner{res: &Result{}, covered: map[string]bool{}}
		mem.zipArchive("model.pt", memZip(data), 0, "")
		remote := &scanner{res: &Result{}, covered: map[string]bool{}}
		remote.zipArchive("model.pt", &remoteZip{f: unmapped{bytes.NewReader(data)}}, 0, "")
		checkScan(t, remote.res, int64(len(data)))
		if a, b := fmt.Sprintf("%+v", mem.res), fmt.Sprintf("%+v", remote.res); a != b {
			t.Fatalf("scanned in ranges:\n%s\nin memory:\n%s", b, a)
		}
	})
}
