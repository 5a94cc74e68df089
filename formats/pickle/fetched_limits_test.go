package pickle

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// zeros is a ReaderAt of size bytes: head, then zeros, then tail, allocating nothing for
// the zeros.
type zeros struct {
	head, tail []byte
	size       int64
}

func (z zeros) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		o := off + int64(i)
		switch {
		case o < int64(len(z.head)):
			p[i] = z.head[o]
		case o >= z.size-int64(len(z.tail)):
			p[i] = z.tail[o-(z.size-int64(len(z.tail)))]
		default:
			p[i] = 0
		}
	}
	return len(p), nil
}

// TestFetchedPassAllocatesNoArgument: the pass that finds the fetched memo entries
// (ForgetUnfetched) steps over a counted argument without reading it, so a windowed
// decoder given a 200 MiB BINBYTES8 under a 1 MiB MaxBytesLen reports the limit having
// allocated little — the pass once read the whole argument into memory first.
func TestFetchedPassAllocatesNoArgument(t *testing.T) {
	const n = 200 << 20
	head := []byte{0x80, 4, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(head[3:], n)
	z := zeros{head: head, tail: []byte{'.'}, size: int64(len(head)) + n + 1}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d := NewDecoderAt(z, z.size, Options{ForgetUnfetched: true, Limits: Limits{MaxBytesLen: 1 << 20}})
	_, err := d.Decode()
	runtime.ReadMemStats(&after)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "MaxBytesLen" {
		t.Fatalf("err = %v, want the MaxBytesLen limit", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("allocated %d MiB decoding past a 200 MiB argument refused at 1 MiB", got>>20)
	}
}

// TestSetItemCountsTakenItems: items a SetItem hook takes count toward MaxContainerItems
// as the dict's own do; they once went through unbounded (the dict stayed empty).
func TestSetItemCountsTakenItems(t *testing.T) {
	p := []byte{0x80, 4, '}', '('}
	for i := range 1000 {
		p = append(p, 'K', byte(i), 'K', 1)
	}
	p = append(p, 'u', '.')
	take := func(*Dict, Value, Value) (bool, error) { return true, nil }
	for _, hook := range []func(*Dict, Value, Value) (bool, error){nil, take} {
		_, err := NewDecoder(p, Options{SetItem: hook, Limits: Limits{MaxContainerItems: 10}}).Decode()
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != "MaxContainerItems" {
			t.Errorf("hook %v: err = %v, want the MaxContainerItems limit", hook != nil, err)
		}
	}
}
