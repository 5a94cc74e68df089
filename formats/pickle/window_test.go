package pickle

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// countingReaderAt records the reads made of it.
type countingReaderAt struct {
	data  []byte
	reads [][2]int64 // offset, length
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads = append(c.reads, [2]int64{off, int64(len(p))})
	return bytes.NewReader(c.data).ReadAt(p, off)
}

// windowPickle is a list of counted strings and text lines of many lengths, several
// longer than a window of w bytes, so that arguments and lines straddle windows.
func windowPickle(w int) []byte {
	p := []byte{0x80, 4, ']', '('}
	for i := range 200 {
		n := (i * 997) % (3 * w)
		s := strings.Repeat(string(rune('a'+i%26)), n)
		if i%3 == 0 {
			p = append(p, 'V') // UNICODE: a text line
			p = append(p, s...)
			p = append(p, '\n')
			continue
		}
		p = append(p, 'X', 0, 0, 0, 0) // BINUNICODE
		binary.LittleEndian.PutUint32(p[len(p)-4:], uint32(n))
		p = append(p, s...)
	}
	return append(p, 'e', '.')
}

// TestWindowsReadOnceInOrder: a windowed decoder reads every byte of its source once, in
// order — it once re-read the unread tail of each window with the next, so a remote
// source with read-ahead saw overlapping, backward reads. The pass that finds the fetched
// memo entries (ForgetUnfetched) is a second such pass.
func TestWindowsReadOnceInOrder(t *testing.T) {
	const w = 4096
	data := windowPickle(w)
	want, err := NewDecoder(data, Options{}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		forget bool
		passes int
	}{{"tree", false, 1}, {"forget unfetched", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			src := &countingReaderAt{data: data}
			d := newDecoder(reader{src: src, size: int64(len(data)), win: w}, Options{ForgetUnfetched: tc.forget})
			got, err := d.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatal("windowed decode differs from the whole-slice decode")
			}
			// Each pass reads forwards; the fetched pass steps over counted arguments
			// without reading them, the decode reads every byte.
			var totals []int64
			next := int64(0)
			for i, r := range src.reads {
				if i == 0 || r[0] < next {
					if r[0] != 0 {
						t.Fatalf("read at %d after reading up to %d", r[0], next)
					}
					totals = append(totals, 0)
				}
				next = r[0] + r[1]
				totals[len(totals)-1] += r[1]
			}
			if len(totals) != tc.passes {
				t.Fatalf("%d passes over the source, want %d", len(totals), tc.passes)
			}
			for i, total := range totals {
				if size := int64(len(data)); total > size || i == len(totals)-1 && total < size {
					t.Errorf("pass %d read %d bytes of a %d-byte pickle", i+1, total, size)
				}
			}
		})
	}
}
