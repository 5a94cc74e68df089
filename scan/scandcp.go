package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/storage"
)

// dcpFolder scans a DCP folder as DCP's FileSystemReader loads it: .metadata (and any
// per-rank __N.metadata) with pickle.load, then every item its storage entries locate —
// bytes items with torch.load(weights_only=False), tensor chunks with
// torch.load(weights_only=True) — each read from exactly its range of its data file. Every
// byte of a data file must belong to an item. only, when set, limits the data files to
// that one. The files scanned are marked covered.
func (s *scanner) dcpFolder(ctx context.Context, dir, only string) {
	mdPath := storage.Join(dir, dcp.MetadataFile)
	ranks := storage.Glob(ctx, dir, "__*"+dcp.MetadataFile)
	for _, p := range append([]string{mdPath}, ranks...) {
		if s.covered[p] {
			continue
		}
		s.covered[p] = true
		b, err := storage.ReadFile(ctx, p, dcp.MaxMetadata)
		if err != nil {
			s.failed("dcp", p, -1, err)
			continue
		}
		s.layout(p, layoutDCPMetadata)
		s.plainPickle(p, b)
	}
	b, err := storage.ReadFile(ctx, mdPath, dcp.MaxMetadata)
	if err != nil {
		return
	}
	md, err := dcp.ReadMetadata(b, mdPath)
	if err != nil {
		s.problem("dcp", mdPath, -1, ckpterr.ErrCorrupt, "the data files' items cannot be located: %v", err)
		return
	}
	var root *os.Root
	if !storage.IsRemote(dir) {
		if root, err = os.OpenRoot(dir); err != nil {
			s.failed("dcp", dir, -1, err)
			return
		}
		defer root.Close()
	}
	byFile := map[string][]dcp.StorageEntry{}
	for _, e := range md.Storage {
		byFile[e.RelativePath] = append(byFile[e.RelativePath], e)
	}
	rels := make([]string, 0, len(byFile))
	for rel := range byFile {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		path := storage.Join(dir, rel)
		if only != "" && storage.Base(path) != only || s.covered[path] {
			continue
		}
		s.covered[path] = true
		s.layout(path, layoutDCPData)
		// The root refuses names and symlinks that leave the folder.
		if _, err := statIn(ctx, root, path, rel); err != nil {
			s.problem("dcp", path, -1, ckpterr.ErrCorrupt, "data file named by %s: %v", dcp.MetadataFile, err)
			continue
		}
		data, done, err := readWhole(ctx, path)
		if err != nil {
			s.failed("dcp", path, -1, err)
			continue
		}
		s.dcpFile(path, data, byFile[rel], md)
		done()
	}
}

// plainPickle scans a file read by one pickle.load: the pickle must end the file.
func (s *scanner) plainPickle(file string, data []byte) {
	ps := s.scanOnePickle(file, data, 0, 0, "pickle")
	s.addPickle(ps)
	if ps.Err != nil {
		s.pickleProblem(ps)
		return
	}
	s.trailing(file, data, 0, ps.Report.End, "")
}

// dcpFile scans the items of one data file and checks that they account for all its bytes.
func (s *scanner) dcpFile(path string, data []byte, entries []dcp.StorageEntry, md *dcp.Metadata) {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Offset < entries[j].Offset })
	size := int64(len(data))
	type rng struct{ from, to int64 }
	var spans []rng
	done := map[rng]bool{}
	for _, e := range entries {
		where := fmt.Sprintf("item %q", e.FQN)
		if e.Offsets != nil {
			where = fmt.Sprintf("item %q chunk %v", e.FQN, e.Offsets)
		}
		if e.Offset < 0 || e.Length < 0 || e.Offset > size || e.Length > size-e.Offset {
			s.problem("dcp", path, e.Offset, ckpterr.ErrCorrupt, "%s: range of %d bytes runs past the end of the %d-byte file", where, e.Length, size)
			continue
		}
		r := rng{e.Offset, e.Offset + e.Length}
		b := data[r.from:r.to]
		if e.Offsets != nil && safetensors.LooksLike(data[e.Offset:]) {
			// SerializationFormat.SAFETENSORS: tensor chunks live in one safetensors blob
			// that runs to the end of the file; it holds no pickle.
			spans = append(spans, rng{e.Offset, size})
			continue
		}
		spans = append(spans, r)
		if done[r] {
			continue
		}
		done[r] = true
		if len(e.TransformDescriptors) > 0 {
			// Compressed with torch's ZStandard extension: DCP's loader inflates it first,
			// bounded by what the item can hold. The scan keeps its ends only — its
			// records' headers, its pickles and its directory — never its storages.
			ends, err := md.InflateEnds(&e, b, scanItemEnds, scanItemEnds)
			if err != nil {
				kind := ckpterr.ErrCorrupt
				if errors.Is(err, ckpterr.ErrUnsupported) {
					kind = ckpterr.ErrUnsupported
				}
				s.problem("dcp", path, e.Offset, kind, "%s: %v", where, err)
				continue
			}
			if ends.Len > int64(len(ends.Head)) {
				s.zipArchive(path, endsZip{ends}, e.Offset, where)
				continue
			}
			b = ends.Head
		}
		if s.torchLoad(path, b, e.Offset, where, false, false) == "" {
			s.problem("dcp", path, e.Offset, ckpterr.ErrCorrupt, "%s: neither a torch.save archive nor a pickle", where)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var at int64
	for _, r := range spans {
		if r.from > at {
			s.problem("dcp", path, at, ckpterr.ErrCorrupt, "%d bytes belong to no item of %s", r.from-at, dcp.MetadataFile)
		}
		at = max(at, r.to)
	}
	if at < size {
		s.problem("dcp", path, at, ckpterr.ErrCorrupt, "%d bytes belong to no item of %s", size-at, dcp.MetadataFile)
	}
}

// scanItemEnds is how much of each end of an inflated item the scan keeps: a torch.save
// archive's pickle comes first, its directory and last small records last.
const scanItemEnds = 16 << 20

// endsZip is an inflated item known by its ends (dcp.Ends): a zip archive whose
// structures and pickles lie there; a read between them is an error (the scan then cannot
// vouch for the item).
type endsZip struct{ dcp.Ends }

func (z endsZip) Len() int64 { return z.Ends.Len }

func (z endsZip) Bytes(off, n int64) ([]byte, error) {
	switch tailAt := z.Ends.Len - int64(len(z.Tail)); {
	case off < 0 || n < 0 || off > z.Ends.Len || n > z.Ends.Len-off:
		return nil, io.ErrUnexpectedEOF
	case off+n <= int64(len(z.Head)):
		return z.Head[off : off+n], nil
	case off >= tailAt:
		return z.Tail[off-tailAt : off-tailAt+n], nil
	}
	return nil, fmt.Errorf("%w: bytes %d-%d of the inflated item: the scan keeps its first and last %d bytes", ckpterr.ErrUnsupported, off, off+n, int64(scanItemEnds))
}

// statIn stats rel in the local folder root (which refuses names and links that leave it),
// or the object path when the folder is remote (objects have no links).
func statIn(ctx context.Context, root *os.Root, path, rel string) (fs.FileInfo, error) {
	if root == nil {
		return storage.Stat(ctx, path)
	}
	return root.Stat(filepath.FromSlash(rel))
}

// maxRemoteScan bounds a data file scanned from object storage: the scanner checks every
// byte of a file's layout, so a remote one is read into memory whole. (A DCP .metadata
// file has its own bound, dcp.MaxMetadata, the one reading it to convert uses.)
const maxRemoteScan = 2 << 30

// readWhole returns the bytes of the file at path: its mapping, or for an object its
// content read whole (up to maxRemoteScan). done releases them.
func readWhole(ctx context.Context, path string) ([]byte, func(), error) {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	return whole(f)
}

// whole is readWhole of the open file f, which it closes (a mapped one when done is called).
func whole(f storage.File) ([]byte, func(), error) {
	if b, ok := storage.Bytes(f); ok {
		return b, func() { f.Close() }, nil
	}
	defer f.Close()
	if f.Size() > maxRemoteScan {
		return nil, nil, fmt.Errorf("%w: %d bytes in object storage; scan reads a remote file whole and only up to %d bytes: copy it to local disk to scan it", ckpterr.ErrUnsupported, f.Size(), int64(maxRemoteScan))
	}
	b, err := storage.ReadRange(f, 0, f.Size())
	if err != nil {
		return nil, nil, err
	}
	return b, func() {}, nil
}
