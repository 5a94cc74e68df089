package scan

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
)

// TestScanLoaderParity scans the committed fixtures of testdata/hostile/round3.py (issue
// 29; cmd/ckpt's TestScanRound3 shows in the oracle that each loader runs the payloads):
// what a loader would run is refused, from where the loader reads it, and each reading a
// file is given is listed.
func TestScanLoaderParity(t *testing.T) {
	const dir = "../testdata/hostile/round3/"
	for _, c := range []struct {
		name    string
		where   string // a refused finding's location contains it
		class   pickle.Safety
		layouts []string // the file's layouts (files of a folder: any of them)
	}{
		{"torch_tar_v7_prefix.pt", `tar member "pickle"`, pickle.Unsafe, []string{layoutTar}},
		{"torch_tar_python_rejects.pt", "pickle", pickle.Unsafe, []string{layoutPickle}},
		{"torch_tar_listing_fails.pt", "read from byte 0", pickle.Unsafe, []string{layoutTar}},
		{"torch_nemo_and_tar.nemo", `tar member "pickle"`, pickle.Unsafe, []string{layoutNemo, layoutTar}},
		{"torch_zip_upper.pt", "evil/DATA.PKL", pickle.Unsafe, []string{layoutZip}},
		{"torch_zip_both.pt", "clean/DATA.PKL", pickle.Unsafe, []string{layoutZip}},
		{"torch_deep.pkl", "pickle 1 (magic number)", pickle.Unknown, []string{layoutPickle}},
		{"trainer_deep", "pickle 1 (magic number)", pickle.Unknown, []string{layoutPickle, layoutZip}},
		{"oldpy_frame_straddle.pt", "data.pkl", pickle.Unsafe, []string{layoutZip}},
		{"numpy_object.npy", "array of objects", pickle.Unsafe, []string{layoutNpy}},
		{"numpy_object.npz", `npz member "arr_1.npy"`, pickle.Unsafe, []string{layoutNpz}},
		{"numpy_pickle.npy", "neither .npy nor .npz", pickle.Unsafe, []string{layoutPickle}},
		{"numpy_structured.npy", "array of objects", pickle.Unsafe, []string{layoutNpy}},
		{"numpy_folder", "array of objects", pickle.Unsafe, []string{layoutNpy, layoutZip}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := Scan(context.Background(), dir+c.name)
			if err != nil {
				t.Fatal(err)
			}
			bad := res.Refused()
			if len(bad) == 0 || bad[0].Class != c.class || !slices.ContainsFunc(bad, func(f Finding) bool { return strings.Contains(f.Where, c.where) }) {
				t.Errorf("refused %+v, want %v at %q", bad, c.class, c.where)
			}
			var layouts []string
			for _, f := range res.Files {
				layouts = append(layouts, f.Layout)
			}
			for _, l := range c.layouts {
				if !slices.Contains(layouts, l) {
					t.Errorf("layouts %q, want %q among them", layouts, l)
				}
			}
		})
	}
}

// TestScanNemoBadTars: a .nemo archive with a member NeMo's restore skips (".." or an
// absolute name), a lying PAX size or a size past the end cannot be vouched for, and the
// problem names the member and its byte offset.
func TestScanNemoBadTars(t *testing.T) {
	for name, says := range map[string]string{
		"nemo_dotdot.nemo":   `tar: "../escaped.txt": byte 7168: its name is absolute`,
		"nemo_absolute.nemo": `tar: "/tmp/ckpt-absolute.txt": byte 7168: its name is absolute`,
		"nemo_pax_size.nemo": `tar: "./tokenizer.model": byte 7168: its PAX record gives 1024 bytes, its header 3`,
		"nemo_huge.nemo":     `tar: "./vocab.txt": byte 7168: 17179869184 bytes at byte 7680 run past the end`,
	} {
		res, err := Scan(context.Background(), filepath.Join("../testdata/hostile/round3", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Refused()) > 0 || !slices.ContainsFunc(res.Problems, func(p *Problem) bool { return strings.Contains(p.Error(), says) }) {
			t.Errorf("%s: problems %v, refused %v; want a problem naming %s", name, res.Problems, res.Refused(), says)
		}
	}
}

// TestIsPickleLenient: in a folder, a broken pickle counts when it reached a global Python
// imported before failing — a dotted name, or a finding standing for one the scanner cannot
// name (here a STACK_GLOBAL whose module is a 2000-byte string, past what the scanner
// tracks) — while text whose first letter is an opcode does not.
func TestIsPickleLenient(t *testing.T) {
	long := append([]byte{0x80, 0x04, 0x58}, 0xd0, 0x07, 0, 0)
	long = append(long, strings.Repeat("a", 2000)...)
	long = append(long, 0x8c, 1, 'x', 0x93, 0xff) // STACK_GLOBAL, then a byte no opcode is
	for name, c := range map[string]struct {
		data []byte
		want bool
	}{
		"dynamic STACK_GLOBAL then broken":  {long, true},
		"dotted GLOBAL then broken":         {[]byte("cos\nsystem\n\xff"), true},
		"text":                              {[]byte("Some notes about the model\n"), false},
		"GLOBAL of empty names then broken": {[]byte("c\n\n\xff"), false},
	} {
		ps := PickleScan{}
		ps.Report, ps.Err = pickle.ScanOne(c.data)
		if got := isPickle(ps, true); got != c.want {
			t.Errorf("%s: isPickle %v, want %v (%+v, %v)", name, got, c.want, ps.Report.Globals, ps.Err)
		}
	}
}

// TestScanDeflatedBeyondLimits: a deflated data.pkl inflating past what the scanner
// inflates (here 100× its compressed size) is refused as unknown code — torch inflates and
// unpickles it — not passed over as a broken record.
func TestScanDeflatedBeyondLimits(t *testing.T) {
	pkl := append([]byte{0x80, 0x02, 'B'}, binary.LittleEndian.AppendUint32(nil, 8<<20)...)
	pkl = append(append(pkl, make([]byte, 8<<20)...), 'c', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm', '\n', '.')
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Deflate})
	w.Write(pkl)
	w, _ = zw.CreateHeader(&zip.FileHeader{Name: "archive/byteorder", Method: zip.Store})
	w.Write([]byte("little"))
	zw.Close()
	p := filepath.Join(t.TempDir(), "model.pt")
	os.WriteFile(p, buf.Bytes(), 0o644)
	res, err := Scan(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	bad := res.Refused()
	if len(bad) != 1 || bad[0].Class != pickle.Unknown || !strings.Contains(bad[0].Why, "beyond the scanner's limits") {
		t.Errorf("refused %+v, problems %v", bad, res.Problems)
	}
}

// TestScanNumpyAsTorch: a file named .npz that is a torch.save zip is read by np.load
// (members that are not arrays: nothing unpickled) and by torch.load (its data.pkl): what
// torch.load would run is refused.
func TestScanNumpyAsTorch(t *testing.T) {
	b, err := os.ReadFile("../testdata/hostile/round3/torch_zip_upper.pt")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "arrays.npz")
	os.WriteFile(p, b, 0o644)
	res, err := Scan(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if bad := res.Refused(); len(bad) == 0 || bad[0].Class != pickle.Unsafe || res.Files[0].Layout != layoutNpz {
		t.Errorf("files %v, refused %+v", res.Files, bad)
	}
}

// TestScanTarLinks: the "pickle" member torch's legacy loader reads through
// tar.extractfile may be a hard link to another member: that member is read as the object
// pickle, its globals refused where torch reads them (round3.py's torch_tar_hardlink.pt
// shows torch.load running the target's payload).
func TestScanTarLinks(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, b []byte) {
		h.Mode, h.Size = 0o644, int64(len(b))
		tw.WriteHeader(h)
		tw.Write(b)
	}
	add(&tar.Header{Name: "storages"}, []byte("\x80\x02K\x00.\x80\x02].")) // count 0, views []
	add(&tar.Header{Name: "tensors"}, []byte("\x80\x02K\x00."))
	add(&tar.Header{Name: "object"}, []byte("cposix\nsystem\n(S'true'\ntR."))
	tw.WriteHeader(&tar.Header{Name: "pickle", Linkname: "object", Typeflag: tar.TypeLink, Mode: 0o644})
	tw.Close()
	p := filepath.Join(t.TempDir(), "old.pt")
	os.WriteFile(p, buf.Bytes(), 0o644)
	res, err := Scan(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	bad := res.Refused()
	if len(bad) == 0 || bad[0].Class != pickle.Unsafe || !strings.Contains(bad[0].Where, `tar member "pickle" (linked to "object")`) || len(res.Problems) != 0 {
		t.Errorf("refused %+v, problems %v", bad, res.Problems)
	}
}

// TestProblemsArePositional: every problem is the family's positional error — the layout
// read where it went wrong, the file, the member and byte when known — and errors.Is sorts
// it: corrupt, unsupported, or neither (the file could not be read).
func TestProblemsArePositional(t *testing.T) {
	dir := t.TempDir()
	whole, err := os.ReadFile("../testdata/torch/training_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.pt")
	os.WriteFile(truncated, whole[:len(whole)/2], 0o644)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("not a checkpoint\n"), 0o644)
	for _, c := range []struct {
		path, format, item string
		offset             int64
		kind               error // nil: neither corrupt nor unsupported
		says               string
	}{
		{truncated, "torch-zip", "", 0, ckpterr.ErrCorrupt, "the file looks truncated"},
		{"../testdata/hostile/round3/nemo_huge.nemo", "tar", "./vocab.txt", 7168, ckpterr.ErrCorrupt, "NeMo's restore fails listing the archive"},
		{"../testdata/hostile/round3/nemo_dotdot.nemo", "tar", "../escaped.txt", 7168, ckpterr.ErrCorrupt, "NeMo's restore skips it"},
		{"../testdata/ecosystem/megatron/nemo1/model_gz.nemo", "nemo", "", 0, ckpterr.ErrUnsupported, "gzip-compressed"},
		{notes, "", "", -1, ckpterr.ErrUnsupported, "not a checkpoint"},
	} {
		res, err := Scan(context.Background(), c.path)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Problems) == 0 {
			t.Errorf("%s: no problem", c.path)
			continue
		}
		p := res.Problems[0]
		if p.Format != c.format || p.File != c.path || p.Item != c.item || p.Offset != c.offset || !strings.Contains(p.Error(), c.says) {
			t.Errorf("%s: %q %q %q byte %d: %v; want %q %q byte %d saying %q", c.path, p.Format, p.File, p.Item, p.Offset, p, c.format, c.item, c.offset, c.says)
		}
		for _, kind := range []error{ckpterr.ErrCorrupt, ckpterr.ErrUnsupported} {
			if errors.Is(p, kind) != (kind == c.kind) {
				t.Errorf("%s: errors.Is(%v) = %v", c.path, kind, !(kind == c.kind))
			}
		}
	}
}
