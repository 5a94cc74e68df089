package scan

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/npy"
)

// Layouts of numpy files.
const (
	layoutNpy = "numpy .npy"
	layoutNpz = "numpy .npz"
)

// isNumpy reports whether a file is read with np.load: named .npy or .npz (whatever it
// holds: np.load goes by content), or starting with the .npy magic.
func isNumpy(path string, head []byte) bool {
	lower := strings.ToLower(path)
	return strings.HasSuffix(lower, ".npy") || strings.HasSuffix(lower, ".npz") || bytes.HasPrefix(head, []byte(npy.Magic))
}

// numpyLoad scans a file as np.load(path, allow_pickle=True) reads it: a zip archive (an
// .npz, each member holding an array read when accessed), an .npy array (whose data is a
// pickle when its dtype holds objects), or else a pickle. It returns the layout.
func (s *scanner) numpyLoad(file string, data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte(zipMagic)) || bytes.HasPrefix(data, []byte(zipEndSig)):
		s.npzArchive(file, data)
		return layoutNpz
	case bytes.HasPrefix(data, []byte(npy.Magic)):
		s.npyArray(file, data, 0, "", false)
		return layoutNpy
	}
	// np.load unpickles what is neither (allow_pickle=True).
	ps := s.scanOnePickle(file, data, 0, 0, "pickle (np.load reads a file that is neither .npy nor .npz as one)")
	s.addPickle(ps)
	s.pickleProblem(ps)
	return layoutPickle
}

// npyArray scans an .npy array (at base in file, or in an inflated record) as
// format.read_array reads it: the header, then — when the dtype holds Python objects —
// one pickle.load of the data.
func (s *scanner) npyArray(file string, b []byte, base int64, where string, inflated bool) {
	h, err := npy.ReadHeader(b, int64(len(b)))
	if err != nil {
		s.problem("npy", file, base, ckpterr.ErrCorrupt, "%s", joinWhere(where, err.Error()+": np.load refuses it"))
		return
	}
	if h.Objects == npy.NoObjects {
		return
	}
	ps := s.scanOnePickle(file, b, base, h.Data, joinWhere(where, fmt.Sprintf("the pickle of an array of objects (descr %s)", h.Descr)))
	ps.Inflated = inflated
	if h.Objects == npy.MaybeObjects && !isPickle(ps, false) {
		s.problem("npy", file, base+h.Data, ckpterr.ErrUnsupported, "%s", joinWhere(where, fmt.Sprintf("an array whose descr %s ckpt does not read: np.load may unpickle its data", h.Descr)))
		return
	}
	s.addPickle(ps)
	s.pickleProblem(ps)
}

// npyHead is how much of a deflated .npz member is inflated to read its header: numpy
// writes a few hundred bytes, and a longer one is read whole.
const npyHead = 64 << 10

// npzArchive scans an .npz archive as np.load's NpzFile reads it: every member that
// starts with the .npy magic is an array format.read_array reads (the others are returned
// as bytes). The archive must be one the scanner's zip reader vouches for.
func (s *scanner) npzArchive(file string, data []byte) {
	d, err := readZipDir(memZip(data))
	if err == nil {
		err = d.check(int64(len(data)))
	}
	if err != nil {
		s.problem("npz", file, 0, ckpterr.ErrCorrupt, "zip: %v", err)
		return
	}
	for _, e := range d.Entries {
		where := fmt.Sprintf("npz member %q", e.Name)
		raw := data[e.DataOff:e.DataEnd]
		switch e.Method {
		case zipMethodStore:
			s.npyArray(file, raw, e.DataOff, where, false)
		case zipMethodFlate:
			head, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), npyHead))
			if err != nil && len(head) < 8 {
				s.problem("npz", file, e.DataOff, ckpterr.ErrCorrupt, "%s: %v", where, err)
				continue
			}
			if !bytes.HasPrefix(head, []byte(npy.Magic)) {
				continue // np.load returns its bytes
			}
			h, err := npy.ReadHeader(head, int64(e.Size))
			if err == nil && h.Objects == npy.NoObjects {
				continue
			}
			b, err := inflateRecord(raw, e.Size)
			if errors.Is(err, errBeyondLimits) {
				s.beyondLimits(file, e.DataOff, where, err.Error())
				continue
			}
			if err != nil {
				s.problem("npz", file, e.DataOff, ckpterr.ErrCorrupt, "%s: %v", where, err)
				continue
			}
			s.npyArray(file, b, 0, where, true)
		default:
			s.problem("npz", file, e.DataOff, ckpterr.ErrUnsupported, "%s: compression method %d, which the scanner does not read", where, e.Method)
		}
	}
}
