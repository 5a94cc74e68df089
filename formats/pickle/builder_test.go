package pickle

import (
	"bytes"
	"encoding/binary"
)

// pb assembles pickles opcode by opcode for hand-written test inputs.
type pb struct {
	bytes.Buffer
	memo int // next memo index for put()
}

func (p *pb) op(b ...byte) *pb { p.Write(b); return p }

func (p *pb) proto(n byte) *pb { return p.op(opProto, n) }

func (p *pb) global(module, name string) *pb {
	p.WriteByte(opGlobal)
	p.WriteString(module + "\n" + name + "\n")
	return p
}

func (p *pb) u32(v uint32) *pb {
	p.Write(binary.LittleEndian.AppendUint32(nil, v))
	return p
}

func (p *pb) u64(v uint64) *pb {
	p.Write(binary.LittleEndian.AppendUint64(nil, v))
	return p
}

// str writes a str the way protocols 2–3 do (BINUNICODE).
func (p *pb) str(s string) *pb {
	p.WriteByte(opBinUnicode)
	p.u32(uint32(len(s)))
	p.WriteString(s)
	return p
}

// sstr writes a str the way protocol 4 does (SHORT_BINUNICODE).
func (p *pb) sstr(s string) *pb {
	p.op(opShortBinUnicode, byte(len(s)))
	p.WriteString(s)
	return p
}

func (p *pb) sbytes(b []byte) *pb {
	p.op(opShortBinBytes, byte(len(b)))
	p.Write(b)
	return p
}

func (p *pb) int(v int64) *pb {
	switch {
	case v >= 0 && v < 256:
		return p.op(opBinInt1, byte(v))
	case v >= 0 && v < 65536:
		return p.op(opBinInt2, byte(v), byte(v>>8))
	case v != int64(int32(v)):
		p.op(opLong1, 8)
		return p.u64(uint64(v))
	}
	p.WriteByte(opBinInt)
	return p.u32(uint32(int32(v)))
}

// put memoizes the top of the stack at the next index, as picklers do.
func (p *pb) put() int {
	i := p.memo
	p.memo++
	if i < 256 {
		p.op(opBinPut, byte(i))
	} else {
		p.WriteByte(opLongBinPut)
		p.u32(uint32(i))
	}
	return i
}

func (p *pb) get(i int) *pb {
	if i < 256 {
		return p.op(opBinGet, byte(i))
	}
	p.WriteByte(opLongBinGet)
	return p.u32(uint32(i))
}

func (p *pb) stop() []byte {
	p.WriteByte(opStop)
	return bytes.Clone(p.Bytes())
}

// latin1UTF8 is what protocols 0–2 store for bytes b: the latin-1 decoding
// of b, encoded as UTF-8 by BINUNICODE.
func latin1UTF8(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}
