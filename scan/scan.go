// Package scan is ckpt's security scanner. Scan answers one question: would loading
// this checkpoint the way its producer loads it — torch.load(weights_only=False), DCP's loader (which unpickles .metadata with pickle.load
// and every bytes item with torch.load(weights_only=False)), NeMo's restore_from,
// np.load(allow_pickle=True) — import or call anything beyond pure data? It finds the
// pickles where those loaders find them, not by guessing: a torch.save zip's data.pkl (and
// every other .pkl record, names matched without case as torch's miniz matches them), the
// sequence of pickles of a legacy stream as torch.serialization._legacy_load reads it (any
// protocol, any spelling of the magic number), the members of a legacy tar archive and of a
// .nemo archive as Python's tarfile reads them (scantar.go), a bare pickle, the object
// arrays of .npy and .npz files (scannpy.go), a DCP folder's .metadata and each item its
// storage entries locate. A file more than one loader reads, or that a loader reads
// differently across the CPython versions torch runs on, is scanned in every reading; the
// worst verdict wins. Bytes that no archive record, pickle or item accounts for, members
// torch refuses, and layouts torch does not load are problems: the scan then cannot vouch
// for the file. What the scanner cannot follow — a pickle beyond its limits — is refused as
// unknown code, never passed over.
//
// The policy is default-deny. Allowed are torch's weights_only allowlist (pickle.Allowed)
// and the pure-data reconstructors ckpt models (pickle.IsModeled, and the DCP metadata
// dataclasses). Every other global — every dotted name included — is refused: "known
// code execution" when it is or reaches a known gadget (pickle.Dangerous), "would import
// and call unknown code" otherwise. A TorchScript archive is refused as known code
// execution: torch.load hands it to torch.jit.load, which runs its code.
package scan

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/storage"
)

// Result is what Scan found.
type Result struct {
	// Path is what was scanned.
	Path string
	// Files lists every file looked at with the layout it was read as, in scan order.
	Files []ScannedFile
	// Pickles lists every pickle found, in scan order.
	Pickles []PickleScan
	// Problems are what keeps the scan from vouching for a file: malformed pickles, bytes
	// no record or item accounts for, members torch refuses, layouts it does not load.
	Problems []*Problem
	// Code lists the findings that are not a global: a TorchScript archive.
	Code []Finding
}

// ScannedFile is one file a scan looked at.
type ScannedFile struct {
	Path string
	// Layout is how the file was read: "torch zip", "TorchScript archive", "torch legacy
	// stream", "torch legacy tar", "pickle", "DCP metadata", "DCP data", "safetensors",
	// "NeMo archive" (a .nemo tar, whose weights members are scanned in place), "numpy
	// .npy", "numpy .npz" (read as np.load(allow_pickle=True) reads them), or "not a
	// checkpoint" (a folder's other files: configs, tokenizers, text). A file more than
	// one loader reads is listed once per layout.
	Layout string
}

// Layouts a scan reports.
const (
	layoutZip         = "torch zip"
	layoutTorchScript = "TorchScript archive"
	layoutLegacy      = "torch legacy stream"
	layoutTar         = "torch legacy tar"
	layoutPickle      = "pickle"
	layoutDCPMetadata = "DCP metadata"
	layoutDCPData     = "DCP data"
	layoutSafetensors = "safetensors"
	layoutNemo        = "NeMo archive"
	layoutNone        = "not a checkpoint"
)

// PickleScan is the scan of one pickle inside a checkpoint.
type PickleScan struct {
	// File is the file holding the pickle; Where locates it inside the file ("archive/data.pkl"
	// of a zip, "pickle 4 (object)" of a legacy stream, `item "optim.state"` of a DCP file).
	File, Where string
	// Base is the pickle's byte offset in File; global offsets in Report are relative to it.
	// For a deflated record they are offsets in the inflated record, and Inflated is set.
	Base     int64
	Inflated bool
	Report   pickle.ScanReport
	// Err is set when the pickle is malformed; the globals seen before it are still listed
	// (Python would have imported and called them before failing).
	Err error
}

// A Problem is a reason a scan cannot vouch for a file, as the family's positional error:
// Format is the layout being read where it went wrong ("torch-zip", "tar", "dcp",
// "pickle", …; "" for a file of no layout), Offset the byte in File (-1 for none), and
// errors.Is tells a broken file (ckpterr.ErrCorrupt) from one the scanner or the loader
// does not read (ckpterr.ErrUnsupported) and from an I/O error.
type Problem = ckpterr.FormatError

// Finding is a global (or, for Code findings, an archive) the policy refuses, located in
// its file.
type Finding struct {
	File, Where string
	// Offset is the byte offset of the opcode in File (in the inflated record when Inflated).
	Offset   int64
	Inflated bool
	// Global is the name; zero for a Code finding.
	Global pickle.Global
	Class  pickle.Safety
	// Why says how it runs code, for dangerous ones.
	Why string
}

// Refused returns the findings the policy refuses, worst class first, then in scan order.
func (r *Result) Refused() []Finding {
	out := append([]Finding(nil), r.Code...)
	for _, s := range r.Pickles {
		for _, g := range s.Report.Globals {
			if g.Class.Refused() {
				out = append(out, Finding{s.File, s.Where, s.Base + g.Offset, s.Inflated, g.Global, g.Class, g.Why})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Class > out[j].Class })
	return out
}

// SortedGlobals lists the distinct globals of all pickles, worst class first, then by name;
// findings that name no global (pickle.ScannedGlobal) are listed once per opcode and reason.
func (r *Result) SortedGlobals() []pickle.ScannedGlobal {
	type key struct {
		g       pickle.Global
		op, why string
	}
	seen := map[key]bool{}
	var out []pickle.ScannedGlobal
	for _, s := range r.Pickles {
		for _, g := range s.Report.Globals {
			k := key{g: g.Global}
			if g.Global == (pickle.Global{}) {
				k.op, k.why = g.Opcode, g.Why
			}
			if !seen[k] {
				seen[k] = true
				out = append(out, g)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return out[i].Class > out[j].Class
		}
		return out[i].Global.String() < out[j].Global.String()
	})
	return out
}

// scanPolicy adds to pickle.Classify the data classes other readers model: the DCP
// metadata dataclasses (and the pathlib paths StorageMeta holds).
var scanPolicy = func() map[pickle.Global]bool {
	m := map[pickle.Global]bool{}
	for _, g := range dcp.MetadataGlobals() {
		m[g] = true
	}
	return m
}()

// Scan finds every pickle in the checkpoint at path (a file, or every file of a folder)
// the way torch.load and DCP's loader find them, and classifies each Python global they
// reference without decoding values or executing anything. The error is for a path that
// cannot be read at all; everything about the content is in the result.
func Scan(ctx context.Context, path string) (*Result, error) {
	st, err := storage.Stat(ctx, path)
	if err != nil {
		return nil, err
	}
	s := &scanner{res: &Result{Path: path}, covered: map[string]bool{}}
	if !st.IsDir() {
		dir := storage.Dir(path)
		if strings.HasSuffix(path, ".distcp") && fileExists(ctx, storage.Join(dir, dcp.MetadataFile)) {
			s.dcpFolder(ctx, dir, storage.Base(path))
		}
		if !s.covered[path] {
			s.file(ctx, path, false)
		}
		return s.done(ctx, path)
	}
	err = storage.WalkDir(ctx, path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if fileExists(ctx, storage.Join(p, dcp.MetadataFile)) {
				s.dcpFolder(ctx, p, "")
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// A link to a file is scanned like the file (a Hugging Face hub cache snapshot
			// is made of links to blobs); links to folders are not followed.
			if st, err := storage.Stat(ctx, p); err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		if !s.covered[p] {
			s.file(ctx, p, true)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.done(ctx, path)
}

// done finishes the result of a scan of path, unless ctx ended first: a scan cancelled part
// way vouches for nothing, and the reads that failed then failed for the cancellation, not
// for anything wrong with the checkpoint — they are not Problems.
func (s *scanner) done(ctx context.Context, path string) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.finish()
	return s.res, nil
}

func fileExists(ctx context.Context, p string) bool {
	return storage.IsFile(ctx, p)
}

// scanner accumulates a Result.
type scanner struct {
	res *Result
	// covered are the files already scanned as part of a DCP folder.
	covered map[string]bool
}

// finish applies the policy's extra data classes.
func (s *scanner) finish() {
	for i := range s.res.Pickles {
		gs := s.res.Pickles[i].Report.Globals
		for j := range gs {
			if gs[j].Class == pickle.Unknown && scanPolicy[gs[j].Global] {
				gs[j].Class = pickle.Modeled
			}
		}
	}
}

func (s *scanner) layout(path, layout string) {
	s.res.Files = append(s.res.Files, ScannedFile{path, layout})
}

func (s *scanner) problem(layout, file string, off int64, kind error, format string, args ...any) {
	s.failed(layout, file, off, kindCause(kind, format, args...))
}

// kindCause is a problem's cause, worded by format and args, of kind: ErrCorrupt (the
// family calls a cause corrupt unless it says otherwise) or ErrUnsupported.
func kindCause(kind error, format string, args ...any) error {
	cause := fmt.Errorf(format, args...)
	if kind != ckpterr.ErrCorrupt {
		cause = fmt.Errorf("%w: %w", kind, cause)
	}
	return cause
}

// readerFailed records err, a reader's failure on the bytes at base in file, with why
// (what the loader does then) after it, as a problem of the given kind: positioned where
// the reader's FormatError puts it (its item, its offset past base) when it is one, so the
// problem names the member and byte once, else at base.
func (s *scanner) readerFailed(layout, file string, base int64, kind, err error, where, why string) {
	p := &Problem{Format: layout, File: file, Offset: base}
	text := err.Error()
	var fe *ckpterr.FormatError
	if errors.As(err, &fe) && fe.Format != "" && (fe.File == "" || fe.File == file) {
		p.Format, p.Item, text = fe.Format, fe.Item, fe.Err.Error()
		if fe.Offset >= 0 {
			p.Offset = base + fe.Offset
		}
	}
	p.Err = kindCause(kind, "%s", joinWhere(where, text+": "+why))
	s.res.Problems = append(s.res.Problems, p)
}

// failed records err (reading layout at off in file) as a problem, of err's own kind: a
// reader's corrupt or unsupported input, or an I/O error.
func (s *scanner) failed(layout, file string, off int64, err error) {
	s.res.Problems = append(s.res.Problems, &Problem{Format: layout, File: file, Item: "", Offset: off, Err: err})
}

// file scans one file as torch.load reads it. In a folder a file of no known layout is
// listed and skipped; scanned on its own it is a problem.
func (s *scanner) file(ctx context.Context, path string, inFolder bool) {
	f, err := storage.Open(ctx, path) // once: a remote file's every read goes through it
	if err == nil && storage.IsRemote(path) && s.remoteFile(path, f) {
		f.Close()
		return
	}
	var data []byte
	var done func()
	if err == nil {
		data, done, err = whole(f)
	}
	if err != nil {
		s.failed("", path, -1, err)
		return
	}
	defer done()
	if strings.HasSuffix(path, ".distcp") {
		// A DCP data file outside a folder whose .metadata locates its items: find the
		// archives by their structure, and say the scan could not locate them as DCP does.
		s.layout(path, layoutDCPData)
		s.problem("dcp", path, -1, ckpterr.ErrCorrupt, "no readable %s locates this data file's items: they were found by their structure, not as DCP finds them", dcp.MetadataFile)
		s.concatenated(path, data)
		return
	}
	if isNumpy(path, data) {
		s.layout(path, s.numpyLoad(path, data))
		// The same bytes handed to torch.load (an .npz is a zip, an .npy may be anything):
		// what that reading would run is refused too.
		s.secondary(func(sub *scanner) { sub.loaders(path, data, true) })
		return
	}
	if s.loaders(path, data, inFolder) {
		return
	}
	if safetensors.LooksLike(data) {
		s.layout(path, layoutSafetensors)
		return
	}
	s.layout(path, layoutNone)
	if !inFolder {
		s.problem("", path, -1, ckpterr.ErrUnsupported, "not a checkpoint: neither a torch.save zip, legacy stream or tar, a .nemo archive, a pickle, a numpy array, a DCP folder nor safetensors")
	}
}

// torchLoad scans data (at base in file) as torch.load reads a stream: a zip archive when
// it starts with the zip magic; a file (torch tries tar only on real files at offset 0)
// that Python's tarfile opens as a legacy tar archive (tarLoad); else the legacy pickle
// sequence. where prefixes pickle locations. It returns the layout, or "" when data is
// none of these: a stream whose first pickle breaks before importing anything is not a
// pickle (lenient: in a folder, only globals shaped like Python names count, so text
// files are not taken for pickles).
func (s *scanner) torchLoad(file string, data []byte, base int64, where string, isFile, lenient bool) string {
	if len(data) >= 4 && string(data[:4]) == zipMagic {
		return s.zipArchive(file, memZip(data), base, where)
	}
	if isFile {
		if layout, isTar := s.tarLoad(file, data, base, where, lenient); isTar {
			return layout
		}
		if strings.HasSuffix(file, ".safetensors") {
			// torch.load hands *.safetensors paths to the safetensors library.
			return ""
		}
	}
	return s.legacy(file, data, base, where, lenient)
}

// beyondLimits records bytes a loader would unpickle that are beyond what the scanner
// reads (a record too large to inflate): dangerous-unknown — a refused finding, exit 3 —
// never "not a checkpoint".
func (s *scanner) beyondLimits(file string, off int64, where, why string) {
	s.res.Code = append(s.res.Code, Finding{File: file, Where: where, Offset: off, Class: pickle.Unknown, Why: why})
}

// addPickle records a pickle scan.
func (s *scanner) addPickle(ps PickleScan) {
	s.res.Pickles = append(s.res.Pickles, ps)
}

// pickleProblem records a malformed pickle as a problem too.
func (s *scanner) pickleProblem(ps PickleScan) {
	if ps.Err == nil {
		return
	}
	off := int64(-1)
	if pe := (*ckpterr.FormatError)(nil); errors.As(ps.Err, &pe) && pe.Format == pickle.Format && !ps.Inflated {
		off = ps.Base + pe.Offset
	}
	if errors.Is(ps.Err, pickle.ErrLimit) {
		s.problem("pickle", ps.File, off, ckpterr.ErrUnsupported, "%s: pickle beyond the scanner's limits: %v", ps.Where, ps.Err)
		return
	}
	s.problem("pickle", ps.File, off, ckpterr.ErrCorrupt, "%s: malformed pickle: %v", ps.Where, ps.Err)
}

// joinWhere prefixes a location inside a file with the enclosing item's.
func joinWhere(prefix, where string) string {
	if prefix == "" {
		return where
	}
	return prefix + ": " + where
}

// remoteFile scans the object f at path without reading it whole, when its first bytes
// show it can be — a safetensors file (its header is all there is to scan) or a zip
// archive (a torch.save file: its directory, local headers and pickles are read in
// ranges) — and reports whether it did.
func (s *scanner) remoteFile(path string, f storage.File) bool {
	if strings.HasSuffix(path, ".distcp") || isNumpy(path, nil) {
		return false
	}
	head := make([]byte, min(512, f.Size()))
	if n, _ := f.ReadAt(head, 0); n < len(head) {
		return false
	}
	switch {
	case safetensors.LooksLike(head):
		s.layout(path, layoutSafetensors) // no pickles: its header is all there is to read
	case len(head) >= len(zipMagic) && string(head[:len(zipMagic)]) == zipMagic:
		s.layout(path, s.zipArchive(path, &remoteZip{f: f}, 0, ""))
	default:
		return false
	}
	return true
}
