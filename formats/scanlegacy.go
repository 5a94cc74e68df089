package formats

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/statedict"
)

// legacyMagic is torch.serialization.MAGIC_NUMBER, whatever protocol pickled it.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

// legacyPickles names the pickles of a legacy stream in the order torch reads them.
var legacyPickles = []string{"magic number", "protocol version", "system info", "object", "storage keys"}

// scanOnePickle scans the pickle at data[off:] (file offset base+off) as one pickle.load call.
func (s *scanner) scanOnePickle(file string, data []byte, base, off int64, where string) PickleScan {
	ps := PickleScan{File: file, Where: where, Base: base + off}
	ps.Report, ps.Err = pickle.ScanOne(data[off:])
	return ps
}

// decodeValue decodes the one pickle of data for its value (the magic number, the protocol
// version, counts): plain pickle.load has no persistent_load, so a persistent id fails it.
func decodeValue(data []byte) (pickle.Value, error) {
	return pickle.NewDecoder(data, pickle.Options{}).Decode()
}

// isPickle reports whether a first pickle scan shows a pickle rather than bytes that only
// start like one. A complete pickle is one, and so is one beyond the scanner's limits
// (Python reads on); a broken one counts when it reached a global (Python imported it
// before failing) — when lenient, only a global shaped like a Python dotted name, so that
// a text file whose first letter is an opcode is not taken for one.
func isPickle(ps PickleScan, lenient bool) bool {
	if ps.Err == nil || errors.Is(ps.Err, pickle.ErrLimit) {
		return true
	}
	for _, g := range ps.Report.Globals {
		if !lenient || (pyDotted(g.Global.Module) && pyDotted(g.Global.Name)) {
			return true
		}
	}
	return false
}

// pyDotted reports whether s is a dotted Python identifier path (ASCII identifiers).
func pyDotted(s string) bool {
	if s == "" {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || (part[0] >= '0' && part[0] <= '9') {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// legacy scans data (at base in file) as torch.serialization._legacy_load reads a stream
// that is not a zip: one pickle.load after another — magic number, protocol version,
// system info, the object, the storage keys — stopping where torch stops (a wrong magic
// number or protocol version raises after its pickle ran), then the raw storages. A first
// pickle that is not the magic number makes the data a plain pickle (as DCP's .metadata
// is), which must end the data. Bytes nothing reads are a problem, and are scanned too in
// case they hide a pickle. It returns the layout, or "" when data is not a pickle.
func (s *scanner) legacy(file string, data []byte, base int64, where string, lenient bool) string {
	if len(data) == 0 {
		return ""
	}
	var off int64
	for i, name := range legacyPickles {
		ps := s.scanOnePickle(file, data, base, off, joinWhere(where, fmt.Sprintf("pickle %d (%s)", i+1, name)))
		if i == 0 {
			if !isPickle(ps, lenient) {
				return ""
			}
		}
		s.addPickle(ps)
		if ps.Err != nil {
			s.pickleProblem(ps)
			return layoutOf(i)
		}
		end := off + ps.Report.End
		switch i {
		case 0, 1:
			v, err := decodeValue(data[off:end])
			ok := err == nil
			if i == 0 {
				m, isBig := v.(*big.Int)
				ok = ok && isBig && m.Cmp(legacyMagic) == 0
			} else {
				p, isInt := v.(int64)
				ok = ok && isInt && p == 1001
			}
			if !ok {
				if i == 0 {
					ps.Where = joinWhere(where, "pickle")
					s.res.Pickles[len(s.res.Pickles)-1] = ps
				} else {
					s.problem(file, base+off, statedict.ErrUnsupported, "%s: not protocol version 1001: torch.load stops here", ps.Where)
				}
				s.trailing(file, data, base, end, where)
				return layoutOf(i)
			}
		}
		off = end
	}
	// The storages follow; torchlegacy checks their records and that they end the stream.
	if _, err := torchlegacy.Decode(data, file); err != nil {
		s.problem(file, base, statedict.ErrCorrupt, "%s", joinWhere(where, "torch legacy stream: "+strings.TrimPrefix(err.Error(), file+": ")))
	}
	return layoutLegacy
}

// layoutOf is the layout of a legacy stream whose reading stopped at pickle i.
func layoutOf(i int) string {
	if i == 0 {
		return layoutPickle
	}
	return layoutLegacy
}

// trailing reports the bytes after where a reader stops (data[end:]) and scans them for a
// hidden pickle.
func (s *scanner) trailing(file string, data []byte, base, end int64, where string) {
	if end >= int64(len(data)) {
		return
	}
	s.problem(file, base+end, statedict.ErrCorrupt, "%s", joinWhere(where, fmt.Sprintf("%d bytes after the pickle that neither pickle.load nor torch.load reads", int64(len(data))-end)))
	ps := s.scanOnePickle(file, data, base, end, joinWhere(where, fmt.Sprintf("bytes at %d (not read by torch.load)", base+end)))
	if isPickle(ps, true) {
		s.addPickle(ps)
	}
}

// isTar reports whether data starts with a tar header Python's tarfile accepts (its
// checksum matches), as torch.load's first attempt on a file does.
func isTar(data []byte) bool {
	if len(data) < 512 {
		return false
	}
	_, err := tar.NewReader(bytes.NewReader(data)).Next()
	return err == nil
}

// tarArchive scans a legacy tar checkpoint (torch < 0.4) as torch's legacy_load reads it:
// the "storages" member (a count, then per storage a pickled (key, location, type) and its
// raw bytes, then the pickled storage views), the "tensors" member (a count, then per
// tensor a pickled tuple and its raw geometry) and the "pickle" member (the object). Every
// other member is scanned as pickles too.
func (s *scanner) tarArchive(file string, data []byte) {
	tr := tar.NewReader(bytes.NewReader(data))
	members := map[string][]byte{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.problem(file, -1, statedict.ErrCorrupt, "tar: %v", err)
			break
		}
		if h.Size > int64(len(data)) {
			s.problem(file, -1, statedict.ErrCorrupt, "tar member %q: %d bytes in a %d-byte file", h.Name, h.Size, len(data))
			break
		}
		b, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			s.problem(file, -1, statedict.ErrCorrupt, "tar member %q: %v", h.Name, err)
			break
		}
		if _, dup := members[h.Name]; !dup {
			order = append(order, h.Name)
		}
		members[h.Name] = b // tarfile's getmember returns the last of a name
	}
	for _, name := range []string{"storages", "tensors", "pickle"} {
		if members[name] == nil {
			s.problem(file, -1, statedict.ErrCorrupt, "tar member %q missing: torch.load stops there", name)
		}
	}
	for _, name := range order {
		b := members[name]
		// Offsets inside members are member-relative.
		where := fmt.Sprintf("tar member %q", name)
		switch name {
		case "storages":
			s.tarRecords(file, b, where, tarStorage)
		case "tensors":
			s.tarRecords(file, b, where, tarTensor)
		default:
			s.pickleSequence(file, b, where)
		}
	}
}

// tarRecords scans a count pickle followed by that many records, each a pickle and raw
// bytes whose length skip computes from the pickle's value; for the storages member the
// storage views pickle follows.
func (s *scanner) tarRecords(file string, b []byte, where string, skip func(v pickle.Value, rest []byte) (int64, error)) {
	add := func(off int64, what string) (pickle.Value, int64, bool) {
		ps := s.scanOnePickle(file, b, 0, off, joinWhere(where, what))
		ps.Inflated = true // offsets are within the member
		s.addPickle(ps)
		if ps.Err != nil {
			s.pickleProblem(ps)
			return nil, 0, false
		}
		end := off + ps.Report.End
		v, err := decodeValue(b[off:end])
		if err != nil {
			s.problem(file, -1, statedict.ErrCorrupt, "%s: %v", ps.Where, err)
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
		s.problem(file, -1, statedict.ErrCorrupt, "%s: count is %v", where, v)
		return
	}
	for i := int64(0); i < n; i++ {
		rec, end, ok := add(off, fmt.Sprintf("record %d", i))
		if !ok {
			return
		}
		l, err := skip(rec, b[end:])
		if err != nil {
			s.problem(file, -1, statedict.ErrCorrupt, "%s: record %d: %v", where, i, err)
			return
		}
		off = end + l
	}
	if strings.HasSuffix(where, `"storages"`) {
		if _, end, ok := add(off, "storage views"); ok {
			off = end
		} else {
			return
		}
	}
	if off != int64(len(b)) {
		s.problem(file, -1, statedict.ErrCorrupt, "%s: %d bytes after the last record", where, int64(len(b))-off)
	}
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

// pickleSequence scans a member read by one unpickler.load (and anything after it).
func (s *scanner) pickleSequence(file string, b []byte, where string) {
	ps := s.scanOnePickle(file, b, 0, 0, where)
	ps.Inflated = true
	s.addPickle(ps)
	if ps.Err != nil {
		s.pickleProblem(ps)
		return
	}
	if ps.Report.End != int64(len(b)) {
		s.problem(file, -1, statedict.ErrCorrupt, "%s: %d bytes after the pickle", where, int64(len(b))-ps.Report.End)
		rest := s.scanOnePickle(file, b, 0, ps.Report.End, where+" (after the pickle)")
		rest.Inflated = true
		if isPickle(rest, true) {
			s.addPickle(rest)
		}
	}
}
