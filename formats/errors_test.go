package formats_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/nemo"
	"github.com/ckpt-dev/ckpt/formats/npy"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/pytar"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
)

// family names which of the shared errors an error is.
func family(err error) string {
	var names []string
	for _, f := range []struct {
		name string
		err  error
	}{{"corrupt", ckpterr.ErrCorrupt}, {"unsupported", ckpterr.ErrUnsupported}, {"dangerous", ckpterr.ErrDangerous}} {
		if errors.Is(err, f.err) {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// TestErrorFamily: whatever the format, a broken file is ErrCorrupt, valid input ckpt does
// not read is ErrUnsupported, a global that would run code is ErrDangerous, and an I/O
// error is none of them (issue 10, item 7) — each error still positional.
func TestErrorFamily(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{} // path → family
	// Every safetensors file the reference refuses.
	var crafted map[string]struct {
		SafeOpen string `json:"safe_open"`
	}
	b, _ := os.ReadFile("../testdata/safetensors/crafted.json")
	if err := json.Unmarshal(b, &crafted); err != nil {
		t.Fatal(err)
	}
	for name, c := range crafted {
		// ckpt carries unknown dtypes along as foreign bytes where the reference refuses.
		if c.SafeOpen != "ok" && name != "unknown_dtype" {
			cases["../testdata/safetensors/crafted/"+name+".safetensors"] = "corrupt"
		}
	}
	// torch.save files cut short, in both formats.
	for _, name := range []string{"training_cuda.pt", "legacy_cuda.pt"} {
		b, _ := os.ReadFile("../testdata/torch/" + name)
		for _, n := range []int{len(b) / 2, len(b) - 30} {
			p := filepath.Join(dir, name+"."+strings.Repeat("x", n%7)+".cut")
			os.WriteFile(p, b[:n], 0o644)
			cases[p] = "corrupt"
		}
	}
	// DCP folders whose .metadata was changed one way each.
	for name, fam := range map[string]string{"missing_chunk": "corrupt", "overlap": "corrupt", "out_of_bounds": "corrupt",
		"escape": "corrupt", "past_eof": "corrupt", "dtype_mismatch": "corrupt", "transform": "unsupported",
		"evil_global": "dangerous", "missing_file": "none"} {
		d := copyDir(t, "../testdata/dcp/sharded")
		md, _ := os.ReadFile("../testdata/dcp/mutated/" + name + ".metadata")
		os.WriteFile(filepath.Join(d, ".metadata"), md, 0o644)
		cases[d] = fam
	}
	// A Hugging Face folder missing a shard its index names.
	hf := copyDir(t, "../testdata/hf/mistral_sharded")
	os.Remove(filepath.Join(hf, "model-00002-of-00004.safetensors"))
	cases[hf] = "corrupt"
	cases[filepath.Join(dir, "missing.pt")] = "none"

	for path, want := range cases {
		ck, err := formats.Open(context.Background(), path)
		if err == nil {
			ck.Close()
			t.Errorf("%s: opened", path)
			continue
		}
		if got := family(err); got != want {
			t.Errorf("%s: %v: family %s, want %s", path, err, got, want)
		}
		if !strings.Contains(err.Error(), filepath.Base(path)) && !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v does not name the file", path, err)
		}
	}
}

// TestFormatErrorEveryReader: a corrupt input of each reader fails with the one positional
// error type, ckpterr.FormatError, naming the format, the file, the item and the byte offset
// where the reader knows them, and ckpterr.ErrCorrupt (issue 28, item 11).
func TestFormatErrorEveryReader(t *testing.T) {
	dir := t.TempDir()
	write := func(p string, b []byte) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := func(path string) error {
		ck, err := formats.Open(context.Background(), path)
		if err == nil {
			ck.Close()
		}
		return err
	}

	// A torch zip archive whose data.pkl starts with a byte that is no pickle opcode.
	zipped, err := os.ReadFile("../testdata/torch/training_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(zipped), int64(len(zipped)))
	if err != nil {
		t.Fatal(err)
	}
	var pkl *zip.File
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			pkl = f
		}
	}
	pklAt, err := pkl.DataOffset()
	if err != nil {
		t.Fatal(err)
	}
	badPkl := bytes.Clone(zipped)
	badPkl[pklAt+2] = 0xff // after PROTO 2: an opcode pickle does not have
	zipPath := write("bad_pickle.pt", badPkl)

	// A legacy torch.save stream cut inside its last storage record.
	legacy, err := os.ReadFile("../testdata/torch/legacy_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	legacyPath := write("legacy_cut.pt", legacy[:len(legacy)-30])

	// A DCP folder whose .metadata says a chunk lies past the end of its data file.
	dcpDir := copyDir(t, "../testdata/dcp/sharded")
	md, err := os.ReadFile("../testdata/dcp/mutated/past_eof.metadata")
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dcpDir, ".metadata"), md)
	meta, err := dcp.ReadMetadata(md, ".metadata")
	if err != nil {
		t.Fatal(err)
	}
	pastEOF, ok := meta.Lookup("dt.grid", []int64{3, 4})
	if !ok {
		t.Fatal("past_eof.metadata has no chunk of dt.grid at [3 4]")
	}
	// ... and one whose chunks overlap: a problem of the metadata, with no byte offset.
	dcpOverlap := copyDir(t, "../testdata/dcp/sharded")
	md, err = os.ReadFile("../testdata/dcp/mutated/overlap.metadata")
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dcpOverlap, ".metadata"), md)

	// A DCP folder whose first chunk, a torch.save archive inside __0_0.distcp, lost its
	// end-of-central-directory record.
	dcpItem := copyDir(t, "../testdata/dcp/sharded")
	distcp, err := os.ReadFile(filepath.Join(dcpItem, "__0_0.distcp"))
	if err != nil {
		t.Fatal(err)
	}
	itemEntry, ok := func() (*dcp.StorageEntry, bool) {
		md, err := os.ReadFile(filepath.Join(dcpItem, ".metadata"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := dcp.ReadMetadata(md, ".metadata")
		if err != nil {
			t.Fatal(err)
		}
		return m.Lookup("model.emb.weight", []int64{0, 0})
	}()
	if !ok || !bytes.HasPrefix(distcp[itemEntry.Offset:], []byte("PK\x03\x04")) {
		t.Fatal("sharded DCP fixture: model.emb.weight is no torch.save archive")
	}
	item := distcp[itemEntry.Offset : itemEntry.Offset+itemEntry.Length]
	copy(item[bytes.LastIndex(item, []byte("PK\x05\x06")):], "XX")
	write(filepath.Join(dcpItem, "__0_0.distcp"), distcp)
	readItem := func() error {
		ck, err := formats.Open(context.Background(), dcpItem)
		if err != nil {
			return err
		}
		defer ck.Close()
		nt, err := ck.Tensor("model.emb.weight")
		if err != nil {
			return err
		}
		_, err = nt.Bytes()
		return err
	}

	// A .nemo archive whose weights member is a torch zip cut short.
	var nemoTar bytes.Buffer
	tw := tar.NewWriter(&nemoTar)
	for _, m := range []struct {
		name string
		data []byte
	}{{"./model_config.yaml", []byte("a: 1\n")}, {"./model_weights.ckpt", zipped[:len(zipped)/2]}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(m.data)
	}
	tw.Close()
	nemoPath := write("cut_weights.nemo", nemoTar.Bytes())

	type want struct {
		format, file, item string
		offset             int64 // -1: none; -2: some offset within the file
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want want
	}{
		{"safetensors", func() error { return open("../testdata/safetensors/crafted/overlap.safetensors") },
			want{safetensors.Format, "../testdata/safetensors/crafted/overlap.safetensors", "b", 62}},
		{"torch zip", func() error { return open(zipPath) },
			want{torchzip.Format, zipPath, pkl.Name, pklAt}},
		{"torch legacy", func() error { return open(legacyPath) },
			want{torchlegacy.Format, legacyPath, "", -2}},
		{"dcp data file", func() error { return open(dcpDir) },
			want{dcp.Format, filepath.Join(dcpDir, pastEOF.RelativePath), "dt.grid", pastEOF.Offset}},
		{"dcp item", readItem,
			want{dcp.Format, filepath.Join(dcpItem, itemEntry.RelativePath), "model.emb.weight", itemEntry.Offset}},
		{"dcp metadata", func() error { return open(dcpOverlap) },
			want{dcp.Format, filepath.Join(dcpOverlap, ".metadata"), "dt.grid", -1}},
		{"pickle", func() error {
			_, err := pickle.NewDecoder([]byte("\x80\x02K"), pickle.Options{}).Decode()
			return err
		}, want{pickle.Format, "", "BININT1", 2}},
		{"npy", func() error {
			_, err := npy.ReadHeader([]byte("\x93NUMPY\x09\x00\x10\x00"), 10)
			return err
		}, want{npy.Format, "", "", 6}},
		{"tar", func() error { return open("../testdata/hostile/round3/nemo_huge.nemo") },
			want{pytar.Format, "../testdata/hostile/round3/nemo_huge.nemo", "./vocab.txt", 7168}},
		{"nemo member", func() error { return open(nemoPath) },
			want{nemo.Format1, nemoPath, "model_weights.ckpt", 3 * 512}},
		{"nemo", func() error { return open("../testdata/hostile/round3/nemo_dotdot.nemo") },
			want{nemo.Format1, "../testdata/hostile/round3/nemo_dotdot.nemo", "../escaped.txt", 7168}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			var fe *ckpterr.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%v (%T): not a *ckpterr.FormatError", err, err)
			}
			w := tc.want
			if fe.Format != w.format || fe.File != w.file || w.item != "" && fe.Item != w.item {
				t.Errorf("%v: format %q, file %q, item %q; want %q, %q, %q", err, fe.Format, fe.File, fe.Item, w.format, w.file, w.item)
			}
			if w.offset == -2 && fe.Offset <= 0 || w.offset != -2 && fe.Offset != w.offset {
				t.Errorf("%v: offset %d, want %d", err, fe.Offset, w.offset)
			}
			if w.file != "" && strings.Count(err.Error(), w.file) != 1 {
				t.Errorf("%v: names %s other than once", err, w.file)
			}
			if !errors.Is(err, ckpterr.ErrCorrupt) || errors.Is(err, ckpterr.ErrUnsupported) || errors.Is(err, ckpterr.ErrDangerous) {
				t.Errorf("%v: want ErrCorrupt alone (family %s)", err, family(err))
			}
			t.Log(err)
		})
	}
}
