package torchzip

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// renamed copies a zip archive record by record (stored), renaming records.
func renamed(t *testing.T, data []byte, rename func(string) string, extra map[string][]byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	for _, f := range zr.File {
		rc, _ := f.Open()
		var b bytes.Buffer
		b.ReadFrom(rc)
		add(rename(f.Name), b.Bytes())
	}
	for name, b := range extra {
		add(name, b)
	}
	zw.Close()
	return buf.Bytes()
}

// TestFindWithoutCase: torch's reader finds records whatever their case (an archive whose
// data.pkl is named DATA.PKL loads in torch: cmd/ckpt's TestScanRound3), so decoding one
// gives what the original gives; records differing only in case are refused, naming both.
func TestFindWithoutCase(t *testing.T) {
	data, err := os.ReadFile("../../testdata/torch/dtypes.pt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeBytes(data, "dtypes.pt", 0)
	if err != nil {
		t.Fatal(err)
	}
	upper := renamed(t, data, func(n string) string {
		return strings.ReplaceAll(strings.ToUpper(n), strings.ToUpper(n[:strings.IndexByte(n, '/')]), n[:strings.IndexByte(n, '/')])
	}, nil)
	got, err := DecodeBytes(upper, "upper.pt", 0)
	if err != nil {
		t.Fatalf("records in upper case: %v", err)
	}
	if g, w := tensorBytes(t, got), tensorBytes(t, want); fmt.Sprint(g) != fmt.Sprint(w) || len(w) == 0 {
		t.Errorf("records in upper case decode to %d tensors, want %d", len(g), len(w))
	}
	pkl, _ := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	prefix := pkl.File[0].Name[:strings.IndexByte(pkl.File[0].Name, '/')+1]
	both := renamed(t, data, func(n string) string { return n }, map[string][]byte{prefix + "DATA.PKL": []byte("\x80\x02N.")})
	if _, err := DecodeBytes(both, "both.pt", 0); err == nil || !strings.Contains(err.Error(), "differ only in case") {
		t.Errorf("data.pkl and DATA.PKL: %v", err)
	}
}

// TestTruncatedArchive: a torch.save file cut short has no end-of-central-directory record;
// the error says it looks truncated, is corrupt, and never doubles archive/zip's "zip: "
// prefix (issue 28, item 7).
func TestTruncatedArchive(t *testing.T) {
	b, err := os.ReadFile("../../testdata/torch/training_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	const directoryEndLen = 22 // the end-of-central-directory record without its comment
	for _, n := range []int{len(b) / 2, len(b) - directoryEndLen, 100} {
		path := filepath.Join(t.TempDir(), "cut.pt")
		if err := os.WriteFile(path, b[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(t.Context(), path)
		if err == nil || !strings.Contains(err.Error(), "looks truncated") || strings.Contains(err.Error(), "zip: zip:") || !errors.Is(err, ckpterr.ErrCorrupt) {
			t.Errorf("cut at %d of %d bytes: %v", n, len(b), err)
		}
	}
}
