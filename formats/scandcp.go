package formats

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/internal/mmap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// dcpFolder scans a DCP folder as DCP's FileSystemReader loads it: .metadata (and any
// per-rank __N.metadata) with pickle.load, then every item its storage entries locate —
// bytes items with torch.load(weights_only=False), tensor chunks with
// torch.load(weights_only=True) — each read from exactly its range of its data file. Every
// byte of a data file must belong to an item. only, when set, limits the data files to
// that one. The files scanned are marked covered.
func (s *scanner) dcpFolder(dir, only string) {
	mdPath := filepath.Join(dir, dcp.MetadataFile)
	ranks, _ := filepath.Glob(filepath.Join(dir, "__*"+dcp.MetadataFile))
	for _, p := range append([]string{mdPath}, ranks...) {
		if s.covered[p] {
			continue
		}
		s.covered[p] = true
		b, err := os.ReadFile(p)
		if err != nil {
			s.problem(p, -1, statedict.ErrCorrupt, "%v", err)
			continue
		}
		s.layout(p, layoutDCPMetadata)
		s.plainPickle(p, b)
	}
	b, err := os.ReadFile(mdPath)
	if err != nil {
		return
	}
	md, err := dcp.ReadMetadata(b, mdPath)
	if err != nil {
		s.problem(mdPath, -1, statedict.ErrCorrupt, "the data files' items cannot be located: %v", err)
		return
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		s.problem(dir, -1, statedict.ErrCorrupt, "%v", err)
		return
	}
	defer root.Close()
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
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if only != "" && filepath.Base(path) != only || s.covered[path] {
			continue
		}
		s.covered[path] = true
		s.layout(path, layoutDCPData)
		// The root refuses names and symlinks that leave the folder.
		if _, err := root.Stat(filepath.FromSlash(rel)); err != nil {
			s.problem(path, -1, statedict.ErrCorrupt, "data file named by %s: %v", dcp.MetadataFile, err)
			continue
		}
		f, err := mmap.Open(path)
		if err != nil {
			s.problem(path, -1, statedict.ErrCorrupt, "%v", err)
			continue
		}
		s.dcpFile(path, f.Bytes(), byFile[rel], md)
		f.Close()
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
			s.problem(path, e.Offset, statedict.ErrCorrupt, "%s: range of %d bytes runs past the end of the %d-byte file", where, e.Length, size)
			continue
		}
		r := rng{e.Offset, e.Offset + e.Length}
		b := data[r.from:r.to]
		if e.Offsets != nil && looksLikeSafetensors(data[e.Offset:]) {
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
			// Compressed with torch's ZStandard extension: DCP's loader inflates it first.
			plain, err := md.Inflate(&e, b)
			if err != nil {
				s.problem(path, e.Offset, statedict.ErrUnsupported, "%s: %v", where, err)
				continue
			}
			b = plain
		}
		if s.torchLoad(path, b, e.Offset, where, false, false) == "" {
			s.problem(path, e.Offset, statedict.ErrCorrupt, "%s: neither a torch.save archive nor a pickle", where)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var at int64
	for _, r := range spans {
		if r.from > at {
			s.problem(path, at, statedict.ErrCorrupt, "%d bytes belong to no item of %s", r.from-at, dcp.MetadataFile)
		}
		at = max(at, r.to)
	}
	if at < size {
		s.problem(path, at, statedict.ErrCorrupt, "%d bytes belong to no item of %s", size-at, dcp.MetadataFile)
	}
}
