package scan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/nemo"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/pytar"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Tar archives are read as Python's tarfile reads them (package pytar), since that is what
// torch's legacy loader and NeMo's restore_from read: member names with a V7 header's
// prefix, numbers in Python's syntax, and the same failures. A file may be read by more
// than one loader — a .nemo archive that is also a legacy torch tar, a tar whose listing
// or extraction fails so that torch.load unpickles it from byte 0 — and each reading is
// scanned; the worst verdict wins.

// loaders scans a whole file as every loader that may be handed it reads it — torch.load,
// and NeMo's restore_from when Python's tarfile opens it as a .nemo archive — recording
// the layout of each that reads it, and reports whether one did.
func (s *scanner) loaders(file string, data []byte, lenient bool) bool {
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b && nemo.IsGzipArchive(data[:min(len(data), 64<<10)]) {
		s.layout(file, layoutNemo)
		s.problem("nemo", file, 0, ckpterr.ErrUnsupported, "a gzip-compressed .nemo archive, not scanned (its members are not read in place): unpack it (mkdir m && tar xzf %s -C m) and scan m", file)
		return true
	}
	read := false
	// (pytar.IsHeader first: most files are no tar, and reading one costs a window.)
	if pytar.IsHeader(data) {
		if a, err := pytar.Read(bytes.NewReader(data), int64(len(data))); err == nil && nemo.IsTarArchive(a) {
			s.layout(file, layoutNemo)
			s.nemoArchive(file, data, a)
			read = true
		}
	}
	if layout := s.torchLoad(file, data, 0, "", true, lenient); layout != "" {
		s.layout(file, layout)
		read = true
	}
	return read
}

// secondary runs scan on a scanner of its own and keeps what it refuses: a reading some
// loader may take of bytes that are not what the file is for (a tar's bytes unpickled
// from byte 0 when tarfile fails; a .nemo archive's members as a legacy torch tar). Its
// problems are not the file's: where that reading breaks, the loader fails without
// running anything past what the refused findings show.
func (s *scanner) secondary(scan func(sub *scanner)) {
	sub := &scanner{res: &Result{Path: s.res.Path}, covered: map[string]bool{}}
	scan(sub)
	sub.finish()
	for _, ps := range sub.res.Pickles {
		if slices.ContainsFunc(ps.Report.Globals, func(g pickle.ScannedGlobal) bool { return g.Class.Refused() }) {
			s.addPickle(ps)
		}
	}
	s.res.Code = append(s.res.Code, sub.res.Code...)
}

// legacyTarMembers are the members torch's legacy_load reads, in its order.
var legacyTarMembers = []string{"storages", "tensors", "pickle"}

// tarLoad scans data (a file, at base in file) as torch.load's legacy loader reads it
// when Python's tarfile opens it, and reports whether it does; layout is "torch legacy
// tar" when the archive holds a member torch reads (one without any fails with KeyError
// before reading anything). tarfile raising ReadError while listing or extracting the
// archive (a member past the end, a link a filter refuses) makes torch read the file as
// a pickle stream from byte 0 instead; so may other CPython versions: that reading is
// scanned too.
func (s *scanner) tarLoad(file string, data []byte, base int64, where string, lenient bool) (layout string, isTar bool) {
	if !pytar.IsHeader(data) {
		// tarfile refuses the first block (torch then unpickles the file from byte 0), or
		// opens an archive of no members (torch.load then fails finding "storages").
		return "", len(data) >= 512 && allZero(data[:512])
	}
	a, err := pytar.Read(bytes.NewReader(data), int64(len(data)))
	fromZero := func() {
		s.secondary(func(sub *scanner) {
			sub.legacy(file, data, base, joinWhere(where, "the file read from byte 0 (where tarfile fails)"), true)
		})
	}
	switch {
	case errors.Is(err, pytar.ErrNotTar):
		return "", false
	case err != nil:
		// CPython versions disagree on the first header: some open it, some do not.
		s.readerFailed("tar", file, base, ckpterr.ErrUnsupported, err, where, "the CPython versions torch runs on read it differently (as a tar archive, or as a pickle stream from byte 0)")
		fromZero()
		return layoutTar, true
	}
	fromZero()
	legacyLike := slices.ContainsFunc(a.Members, func(m pytar.Member) bool { return slices.Contains(legacyTarMembers, m.Name) })
	if legacyLike {
		layout = layoutTar
	}
	if errors.Is(a.Err, pytar.ErrRead) {
		if legacyLike {
			s.readerFailed("tar", file, base, ckpterr.ErrCorrupt, a.Err, where, "tarfile cannot list the archive, and torch.load reads the file as a pickle stream from byte 0 instead")
		}
		return layout, true
	}
	if a.Err != nil && legacyLike {
		s.readerFailed("tar", file, base, ckpterr.ErrUnsupported, a.Err, where, "the tar readers torch runs with read the archive differently from there")
	}
	if legacyLike {
		s.tarArchive(file, data, base, where, a)
	} else {
		s.secondary(func(sub *scanner) { sub.tarArchive(file, data, base, where, a) })
	}
	return layout, true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// tarMember is a member's bytes (cut at the end of data: tarfile raises there, after the
// unpickler read what was before).
func tarMember(data []byte, m pytar.Member) []byte {
	from := min(m.Data, int64(len(data)))
	return data[from:min(from+max(m.Size, 0), int64(len(data)))]
}

// tarArchive scans a legacy tar checkpoint (torch < 0.4) as torch's legacy_load reads it:
// tar.extract("storages") — a count, then per storage a pickled (key, location, type) and
// its raw bytes, then the pickled storage views —, tar.extract("tensors") — a count, then
// per tensor a pickled tuple and its raw geometry — and tar.extractfile("pickle"), the
// object. Each is the last member of exactly that name, a hard link read as the member it
// links to (extractfile follows symbolic links inside the archive too; extract makes
// them, and the file read is then one outside the archive). The other members' bytes are
// scanned for refused globals.
func (s *scanner) tarArchive(file string, data []byte, base int64, where string, a *pytar.Archive) {
	ms := a.Members
	read := map[int]bool{}
	for _, role := range legacyTarMembers {
		i := lastIndex(ms, len(ms), func(m pytar.Member) bool { return m.Name == role })
		loc := joinWhere(where, fmt.Sprintf("tar member %q", role))
		if i < 0 {
			s.problem("tar", file, base, ckpterr.ErrCorrupt, "%s missing: torch.load stops there", loc)
			continue
		}
		m := ms[i]
		if m.Type == pytar.TypeSymlink && role != "pickle" {
			s.problem("tar", file, base+m.Offset, ckpterr.ErrUnsupported, "%s is a symbolic link to %q: tar.extract makes the link, and torch.load reads whatever file that is on the machine loading it (CPython before 3.14), not a member of the archive", loc, m.Linkname)
		}
		t, err := tarTarget(ms, i)
		if err != nil {
			s.problem("tar", file, base+m.Offset, ckpterr.ErrCorrupt, "%s: %v", loc, err)
			continue
		}
		if t != i {
			loc = joinWhere(where, fmt.Sprintf("tar member %q (linked to %q)", role, ms[t].Name))
		}
		read[t] = true
		b, at := tarMember(data, ms[t]), base+ms[t].Data
		switch role {
		case "storages":
			s.tarRecords(file, b, at, loc, tarStorage, true)
		case "tensors":
			s.tarRecords(file, b, at, loc, tarTensor, false)
		default:
			s.pickleSequence(file, b, at, loc)
		}
	}
	for i, m := range ms {
		if !read[i] && m.HasData() {
			s.secondary(func(sub *scanner) {
				sub.pickleSequence(file, tarMember(data, m), base+m.Data, joinWhere(where, fmt.Sprintf("tar member %q", m.Name)))
			})
		}
	}
}

// tarTarget is the member whose bytes tarfile reads for member i: i itself when it holds
// bytes, the member a link resolves to (tarfile's _find_link_target: a hard link's
// normalized link name among the members before it, a symbolic link's, joined to its
// folder, among all), following links.
func tarTarget(ms []pytar.Member, i int) (int, error) {
	for range 64 {
		m := ms[i]
		switch m.Type {
		case pytar.TypeLink, pytar.TypeSymlink:
			name, limit := m.Linkname, i
			if m.Type == pytar.TypeSymlink {
				if d := pyDirname(m.Name); d != "" {
					name = d + "/" + name
				}
				limit = len(ms)
			}
			name = pyNormpath(name)
			j := lastIndex(ms, limit, func(c pytar.Member) bool { return pyNormpath(c.Name) == name })
			if j < 0 {
				return 0, fmt.Errorf("a link to %q, which is not in the archive: torch.load fails there", m.Linkname)
			}
			i = j
		default:
			if !m.HasData() {
				return 0, fmt.Errorf("not a file (tar type %q): torch.load fails there", m.Type)
			}
			return i, nil
		}
	}
	return 0, errors.New("links that go round in a circle: torch.load fails there")
}

// lastIndex is the index of the last of ms[:limit] for which f holds (tarfile searches
// members from the last), or -1.
func lastIndex(ms []pytar.Member, limit int, f func(pytar.Member) bool) int {
	for i := limit - 1; i >= 0; i-- {
		if f(ms[i]) {
			return i
		}
	}
	return -1
}

// pyDirname is posixpath.dirname.
func pyDirname(p string) string {
	head := p[:strings.LastIndexByte(p, '/')+1]
	if head != "" && strings.Trim(head, "/") != "" {
		head = strings.TrimRight(head, "/")
	}
	return head
}

// pyNormpath is posixpath.normpath: "." for "", "//" kept at the start, "." and empty
// segments dropped, ".." resolved where it can be.
func pyNormpath(p string) string {
	if p == "" {
		return "."
	}
	lead := ""
	switch {
	case strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///"):
		lead = "//"
	case strings.HasPrefix(p, "/"):
		lead = "/"
	}
	var out []string
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
		case c != ".." || (lead == "" && (len(out) == 0 || out[len(out)-1] == "..")):
			out = append(out, c)
		case len(out) > 0:
			out = out[:len(out)-1]
		}
	}
	if r := lead + strings.Join(out, "/"); r != "" {
		return r
	}
	return "."
}

// nemoArchive scans a NeMo 1 .nemo archive as NeMo's restore_from reads it
// (SaveRestoreConnector): tarfile.open(path, "r:"), every member extracted but those
// _is_safe_path refuses — a name absolute or climbing out once normalized, a symbolic or
// hard link — which it skips with a warning; then torch.load of the model_weights.ckpt
// file (at the root or in a rank folder) — here every extracted model_weights.ckpt, the
// last member written to its path, read as torch.load reads a file. The other members
// (model_config.yaml, tokenizer files) are never unpickled. Members NeMo skips, a PAX size
// contradicting its header's, and archives tarfile cannot list are problems, each named
// with its member and byte offset.
func (s *scanner) nemoArchive(file string, data []byte, a *pytar.Archive) {
	if a.Err != nil {
		s.readerFailed("tar", file, 0, ckpterr.ErrCorrupt, a.Err, "", "NeMo's restore fails listing the archive")
		if errors.Is(a.Err, pytar.ErrRead) {
			return
		}
	}
	weights := map[string]int{}
	var order []string
	dist := false
	for i, m := range a.Members {
		n := pyNormpath(m.Name)
		switch {
		case strings.HasPrefix(n, "/") || slices.Contains(strings.Split(n, "/"), ".."):
			s.memberProblem(file, m, ckpterr.ErrCorrupt, "its name is absolute or climbs out of the archive: NeMo's restore skips it")
			continue
		case m.Size != m.HeaderSize:
			s.memberProblem(file, m, ckpterr.ErrCorrupt, "its PAX record gives %d bytes, its header %d (tarfile reads %d)", m.Size, m.HeaderSize, m.Size)
		}
		if strings.HasPrefix(n, "model_weights/") {
			dist = true
		}
		if path.Base(n) != nemo.WeightsMember {
			continue
		}
		if m.Type == pytar.TypeLink || m.Type == pytar.TypeSymlink {
			s.memberProblem(file, m, ckpterr.ErrCorrupt, "a link to %q: NeMo's restore skips it", m.Linkname)
			continue
		}
		if !m.HasData() {
			continue
		}
		if _, ok := weights[n]; !ok {
			order = append(order, n)
		}
		weights[n] = i
	}
	if dist {
		s.problem("tar", file, -1, ckpterr.ErrUnsupported, "the archive holds a distributed checkpoint folder model_weights/, not scanned inside the tar: unpack it (mkdir m && tar xf %s -C m) and scan m/model_weights", file)
	}
	if len(order) == 0 && !dist {
		s.problem("tar", file, -1, ckpterr.ErrCorrupt, "a .nemo archive without %s: NeMo's restore has no weights to load", nemo.WeightsMember)
	}
	for _, n := range order {
		m := a.Members[weights[n]]
		where := fmt.Sprintf("tar member %q", n)
		if s.torchLoad(file, tarMember(data, m), m.Data, where, true, false) == "" {
			s.problem("tar", file, m.Data, ckpterr.ErrCorrupt, "%s: not a torch.save file", where)
		}
	}
}

// memberProblem records a problem of the .nemo archive file's member m, at its header.
func (s *scanner) memberProblem(file string, m pytar.Member, kind error, format string, args ...any) {
	s.res.Problems = append(s.res.Problems, &Problem{Format: "tar", File: file, Item: m.Name, Offset: m.Offset, Err: kindCause(kind, format, args...)})
}

// tarRecords scans a tar member (at base in file) read as a count pickle followed by
// that many records, each a pickle and raw bytes whose length skip computes from the
// pickle's value; for the storages member the storage views pickle follows.
func (s *scanner) tarRecords(file string, b []byte, base int64, where string, skip func(v pickle.Value, rest []byte) (int64, error), views bool) {
	add := func(off int64, what string) (pickle.Value, int64, bool) {
		ps := s.scanOnePickle(file, b, base, off, joinWhere(where, what))
		s.addPickle(ps)
		if ps.Err != nil {
			s.pickleProblem(ps)
			return nil, 0, false
		}
		end := off + ps.Report.End
		v, err := decodeValue(b[off:end])
		if err != nil {
			s.problem("tar", file, base+off, ckpterr.ErrCorrupt, "%s: %v", ps.Where, err)
			return nil, 0, false
		}
		return v, end, true
	}
	v, off, ok := add(0, "count")
	if !ok {
		return
	}
	n, isInt := v.(int64)
	if !isInt || n < 0 || n > int64(len(b)) {
		s.problem("tar", file, base, ckpterr.ErrCorrupt, "%s: count is %v", where, v)
		return
	}
	for i := int64(0); i < n; i++ {
		rec, end, ok := add(off, fmt.Sprintf("record %d", i))
		if !ok {
			return
		}
		l, err := skip(rec, b[end:])
		if err != nil {
			s.problem("tar", file, base+end, ckpterr.ErrCorrupt, "%s: record %d: %v", where, i, err)
			return
		}
		off = end + l
	}
	if views {
		if _, end, ok := add(off, "storage views"); ok {
			off = end
		} else {
			return
		}
	}
	if off != int64(len(b)) {
		s.problem("tar", file, base+off, ckpterr.ErrCorrupt, "%s: %d bytes after the last record", where, int64(len(b))-off)
	}
}

// pickleSequence scans a tar member (at base in file) read by one unpickler.load (and
// anything after it).
func (s *scanner) pickleSequence(file string, b []byte, base int64, where string) {
	if len(b) == 0 {
		s.problem("tar", file, base, ckpterr.ErrCorrupt, "%s: empty", where)
		return
	}
	ps := s.scanOnePickle(file, b, base, 0, where)
	s.addPickle(ps)
	if ps.Err != nil {
		s.pickleProblem(ps)
		return
	}
	s.trailing(file, b, base, ps.Report.End, where)
}

// tarStorage is the raw length after a storage record (key, location, storage type): an
// int64 element count and the elements.
func tarStorage(v pickle.Value, rest []byte) (int64, error) {
	t, ok := v.(pickle.Tuple)
	if !ok || len(t) != 3 {
		return 0, fmt.Errorf("storage record is not a (key, location, type) tuple")
	}
	g, ok := t[2].(pickle.Global)
	if !ok {
		return 0, fmt.Errorf("storage type is not a global")
	}
	dt, ok := statedict.DTypeForStorage(g.Name)
	if !ok {
		return 0, fmt.Errorf("unknown storage type %s", g)
	}
	if len(rest) < 8 {
		return 0, fmt.Errorf("truncated element count")
	}
	n := binary.LittleEndian.Uint64(rest)
	es := uint64(dt.Size())
	if n > uint64(len(rest)-8)/es {
		return 0, fmt.Errorf("%d elements of %s run past the member's end", n, dt)
	}
	return 8 + int64(n*es), nil
}

// tarTensor is the raw geometry after a tensor record: int32 ndim, 4 bytes, ndim sizes and
// strides (int64), and the storage offset.
func tarTensor(_ pickle.Value, rest []byte) (int64, error) {
	if len(rest) < 8 {
		return 0, fmt.Errorf("truncated tensor geometry")
	}
	nd := int64(int32(binary.LittleEndian.Uint32(rest)))
	if nd < 0 || nd > int64(len(rest))/16 {
		return 0, fmt.Errorf("%d dims run past the member's end", nd)
	}
	l := 8 + 16*nd + 8
	if l > int64(len(rest)) {
		return 0, fmt.Errorf("tensor geometry runs past the member's end")
	}
	return l, nil
}
