package scan

import (
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
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
// before failing) — when lenient, only a global shaped like a Python dotted name, or a
// finding standing for globals the scanner cannot name (a dynamic STACK_GLOBAL, a FRAME
// the CPython versions read differently: no text reaches them), so that a text file whose
// first letter is an opcode is not taken for one.
func isPickle(ps PickleScan, lenient bool) bool {
	if ps.Err == nil || errors.Is(ps.Err, pickle.ErrLimit) {
		return true
	}
	for _, g := range ps.Report.Globals {
		named := g.Global != (pickle.Global{})
		if !lenient || named && pyDotted(g.Global.Module) && pyDotted(g.Global.Name) || !named && g.Class.Refused() && g.Why != "" {
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
					s.problem("torch-legacy", file, base+off, ckpterr.ErrUnsupported, "%s: not protocol version 1001: torch.load stops here", ps.Where)
				}
				s.trailing(file, data, base, end, where)
				return layoutOf(i)
			}
		}
		off = end
	}
	// The storages follow; torchlegacy checks their records and that they end the stream.
	if _, err := torchlegacy.Decode(data, file); err != nil {
		s.problem("torch-legacy", file, base, ckpterr.ErrCorrupt, "%s", joinWhere(where, "torch legacy stream: "+strings.TrimPrefix(err.Error(), file+": ")))
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
	s.problem("torch-legacy", file, base+end, ckpterr.ErrCorrupt, "%s", joinWhere(where, fmt.Sprintf("%d bytes after the pickle that neither pickle.load nor torch.load reads", int64(len(data))-end)))
	ps := s.scanOnePickle(file, data, base, end, joinWhere(where, fmt.Sprintf("bytes at %d (not read by torch.load)", base+end)))
	if isPickle(ps, true) {
		s.addPickle(ps)
	}
}
