package pickle

import (
	"math/bits"
	"strconv"
	"strings"
)

// fetchedSet is the set of memo indices a pickle's GET opcodes fetch, found by a pass
// over its opcodes before decoding it (Options.ForgetUnfetched). The decoder keeps only
// these memo entries, packed: slot numbers them in index order, so the memo of a pickle
// that memoizes millions of values and fetches a few thousand holds a few thousand.
type fetchedSet struct {
	bits []uint64
	rank []uint32 // rank[w] counts the set bits of bits[:w]
}

// slot returns the packed position of memo index i, and whether a GET fetches i.
func (f *fetchedSet) slot(i uint64) (uint64, bool) {
	w := i / 64
	if w >= uint64(len(f.bits)) {
		return 0, false
	}
	b := uint64(1) << (i % 64)
	if f.bits[w]&b == 0 {
		return 0, false
	}
	return uint64(f.rank[w]) + uint64(bits.OnesCount64(f.bits[w]&(b-1))), true
}

// findFetched walks the opcodes of the pickle starting at r's position up to its STOP and
// returns the memo indices its GETs fetch. It returns nil — keep every memo entry — when
// the walk does not reach a STOP (the decoder then reports the fault where it meets it),
// or when a fetched index is beyond what the pickle's length could have put (a memo that
// sparse is not worth packing). The walk allocates one bit per memo index up to the
// largest fetched, and nothing for the arguments it passes over.
func findFetched(r reader, lim Limits) *fetchedSet {
	// The decoder refuses a memo of more than MaxMemo entries; a GET past that (or past
	// what the pickle's length could have put) is not worth packing for. This bounds the
	// walk's own memory (a bit and half a bit per index) by the limits, not by the file.
	maxIndex := uint64(min(r.remaining(), lim.MaxMemo))
	var set []uint64
	for r.remaining() > 0 {
		op, err := r.u1()
		if err != nil {
			return nil
		}
		kind := opTable[op].arg
		if opTable[op].name == "" {
			return nil
		}
		if op == opStop {
			f := &fetchedSet{bits: set, rank: make([]uint32, len(set))}
			n := 0
			for w, x := range set {
				f.rank[w] = uint32(n)
				n += bits.OnesCount64(x)
			}
			return f
		}
		var i uint64
		switch kind {
		case argNone:
		case argU1:
			var v byte
			v, err = r.u1()
			i = uint64(v)
		case argU2:
			_, err = r.u2()
		case argI4, argU4:
			var v uint32
			v, err = r.u4()
			i = uint64(v)
		case argU8, argF8:
			err = r.skip(8, "argument")
		case argLine:
			var line []byte
			line, err = r.line(lim.MaxStringLen)
			if err == nil && op == opGet {
				n, perr := strconv.ParseInt(strings.TrimSpace(string(line)), 10, 64)
				if perr != nil || n < 0 {
					return nil
				}
				i = uint64(n)
			}
		case argLine2:
			if _, err = r.line(lim.MaxStringLen); err == nil {
				_, err = r.line(lim.MaxStringLen)
			}
		default:
			var n uint64
			if n, err = r.countPrefix(kind); err == nil {
				err = r.skip(n, "argument")
			}
		}
		if err != nil {
			return nil
		}
		if op == opGet || op == opBinGet || op == opLongBinGet {
			if i > maxIndex {
				return nil
			}
			w := int(i / 64)
			if w >= len(set) {
				set = append(set, make([]uint64, w+1-len(set))...)
			}
			set[w] |= 1 << (i % 64)
		}
	}
	return nil
}
