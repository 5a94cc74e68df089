package formats

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/mmap"
)

// PickleScan is the scan of one pickle inside a checkpoint.
type PickleScan struct {
	// File is the file holding the pickle; Where locates it inside the file ("data.pkl" of
	// the zip, "object pickle" of a legacy stream, "archive at byte N" of a DCP file).
	File, Where string
	// Base is the pickle's byte offset in File; global offsets in Report are relative to it.
	Base   int64
	Report pickle.ScanReport
	// Err is set when the pickle is malformed; the globals seen before it are still listed.
	Err error
}

// Finding is a dangerous global found by Scan, located in its file.
type Finding struct {
	File, Where string
	// Offset is the byte offset of the opcode in File.
	Offset int64
	Global pickle.Global
	Why    string
}

// Dangerous returns the globals of all scans that are classified dangerous.
func Dangerous(scans []PickleScan) []Finding {
	var out []Finding
	for _, s := range scans {
		for _, g := range s.Report.Globals {
			if g.Class == pickle.Unsafe {
				why, _ := pickle.Dangerous(g.Global)
				out = append(out, Finding{s.File, s.Where, s.Base + g.Offset, g.Global, why})
			}
		}
	}
	return out
}

// Scan finds every pickle in the checkpoint at path (a file, or every file of a folder) and
// lists the Python globals each references, without decoding values or executing anything:
// torch.save zips (every .pkl record), legacy streams, bare pickles (DCP .metadata), and the
// torch.save archives embedded back to back in DCP .distcp files, whose bytes items
// PyTorch itself loads with weights_only=False.
func Scan(path string) ([]PickleScan, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return scanFile(path)
	}
	var out []PickleScan
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// A link to a file is scanned like the file (a Hugging Face hub cache snapshot
			// is made of links to blobs); links to folders are not followed.
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		scans, err := scanFile(p)
		if err != nil {
			return err
		}
		out = append(out, scans...)
		return nil
	})
	return out, err
}

func scanFile(path string) ([]PickleScan, error) {
	f, err := mmap.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := f.Bytes()
	switch {
	case bytes.HasPrefix(data, torchzip.Magic):
		if strings.HasSuffix(path, ".distcp") {
			return scanConcatenatedZips(path, data), nil
		}
		return scanZip(path, data, 0, "")
	case bytes.HasPrefix(data, torchlegacy.Magic):
		return scanStream(path, data, 5, "legacy stream"), nil
	case len(data) > 1 && data[0] == 0x80 && data[1] <= 5:
		return scanStream(path, data, 1, "bare"), nil
	}
	return nil, nil
}

// scanZip scans every .pkl record of a zip archive held in data (at base within path).
func scanZip(path string, data []byte, base int64, where string) ([]PickleScan, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("%s: %szip: %w", path, where, err)
	}
	var out []PickleScan
	for _, zf := range zr.File {
		if !strings.HasSuffix(zf.Name, ".pkl") {
			continue
		}
		s := PickleScan{File: path, Where: strings.TrimSpace(where + zf.Name)}
		off, err := zf.DataOffset()
		if err != nil || zf.Method != zip.Store || off+int64(zf.CompressedSize64) > int64(len(data)) {
			s.Err = fmt.Errorf("record %s is not a readable stored record", zf.Name)
			out = append(out, s)
			continue
		}
		s.Base = base + off
		s.Report, s.Err = pickle.Scan(data[off : off+int64(zf.CompressedSize64)])
		out = append(out, s)
	}
	return out, nil
}

// scanStream scans up to n pickles that follow each other at the start of data.
func scanStream(path string, data []byte, n int, where string) []PickleScan {
	var out []PickleScan
	var off int64
	for i := 0; i < n && off < int64(len(data)); i++ {
		dec := pickle.NewDecoder(data[off:], pickle.Options{PersistentLoad: func(pickle.Value) (pickle.Value, error) { return pickle.None{}, nil }})
		_, derr := dec.Decode()
		end := off + dec.Offset()
		s := PickleScan{File: path, Where: fmt.Sprintf("%s pickle %d", where, i+1), Base: off}
		if derr != nil {
			end = int64(len(data)) // scan what is there; Scan reports where it breaks
		}
		s.Report, s.Err = pickle.Scan(data[off:end])
		out = append(out, s)
		if derr != nil {
			break
		}
		off = end
	}
	return out
}

// scanConcatenatedZips walks the torch.save archives DCP writes back to back in a .distcp
// file: each ends with its end-of-central-directory record.
func scanConcatenatedZips(path string, data []byte) []PickleScan {
	var out []PickleScan
	var off int64
	for off < int64(len(data)) {
		if !bytes.HasPrefix(data[off:], torchzip.Magic) {
			// Safetensors-format DCP files or trailing data: nothing pickled beyond here.
			break
		}
		end := zipEnd(data[off:])
		if end < 0 {
			out = append(out, PickleScan{File: path, Where: fmt.Sprintf("archive at byte %d", off), Base: off, Err: errors.New("no end-of-central-directory record")})
			break
		}
		scans, err := scanZip(path, data[off:off+end], off, fmt.Sprintf("archive at byte %d: ", off))
		if err != nil {
			out = append(out, PickleScan{File: path, Where: fmt.Sprintf("archive at byte %d", off), Base: off, Err: err})
			break
		}
		out = append(out, scans...)
		off += end
	}
	return out
}

// zipEnd returns the length of the zip archive at the start of data, found from its first
// end-of-central-directory record (signature, 22 bytes, comment), or -1.
func zipEnd(data []byte) int64 {
	sig := []byte("PK\x05\x06")
	from := 0
	for {
		i := bytes.Index(data[from:], sig)
		if i < 0 {
			return -1
		}
		p := from + i
		if p+22 <= len(data) {
			comment := int(binary.LittleEndian.Uint16(data[p+20:]))
			if p+22+comment <= len(data) {
				return int64(p + 22 + comment)
			}
		}
		from = p + 1
	}
}

// SortedGlobals lists the distinct globals of the scans, dangerous first, then by name.
func SortedGlobals(scans []PickleScan) []pickle.ScannedGlobal {
	seen := map[pickle.Global]bool{}
	var out []pickle.ScannedGlobal
	for _, s := range scans {
		for _, g := range s.Report.Globals {
			if !seen[g.Global] {
				seen[g.Global] = true
				out = append(out, g)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Class == pickle.Unsafe) != (out[j].Class == pickle.Unsafe) {
			return out[i].Class == pickle.Unsafe
		}
		return out[i].Global.String() < out[j].Global.String()
	})
	return out
}
