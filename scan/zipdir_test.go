package scan

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// TestZipDirectoryDisagreement: torch's reader (miniz) takes the directory the zip64 end
// record gives whenever a locator leads to one, archive/zip (and the torch reader of ckpt,
// internal/zipdir) the end record's unless its fields are saturated. An archive whose two
// records disagree is read differently by them, so the scan cannot vouch for it; the same
// archive with the records agreeing is vouched for.
func TestZipDirectoryDisagreement(t *testing.T) {
	data, err := os.ReadFile("../testdata/torch/protocol4.pt")
	if err != nil {
		t.Fatal(err)
	}
	eocd := bytes.LastIndex(data, []byte(zipEndSig))
	if eocd < 0 || string(data[eocd-zip64LocLen:eocd-zip64LocLen+4]) != zip64LocSig {
		t.Fatalf("protocol4.pt: no zip64 locator before the end record at %d", eocd)
	}
	vouched := func(b []byte) *zipDir {
		s := &scanner{res: &Result{}, covered: map[string]bool{}}
		s.zipArchive("protocol4.pt", memZip(b), 0, "")
		if len(s.res.Problems) > 0 {
			return nil
		}
		d, err := readZipDir(memZip(b))
		if err != nil {
			t.Fatalf("no problem reported, but: %v", err)
		}
		return d
	}
	if d := vouched(data); d == nil || len(d.Entries) == 0 {
		t.Fatal("the archive as torch wrote it: not vouched for")
	}
	// The end record's directory size one record short: archive/zip still finds the
	// directory (its base offset falls back to 0), miniz reads the zip64 end record's.
	forged := bytes.Clone(data)
	size := binary.LittleEndian.Uint32(forged[eocd+12:])
	binary.LittleEndian.PutUint32(forged[eocd+12:], size-zipCentralLen)
	s := &scanner{res: &Result{}, covered: map[string]bool{}}
	s.zipArchive("forged.pt", memZip(forged), 0, "")
	if len(s.res.Problems) == 0 || !strings.Contains(s.res.Problems[0].Error(), "disagree") {
		t.Fatalf("end record and zip64 end record disagreeing: problems %v, want one saying they disagree", s.res.Problems)
	}
}
