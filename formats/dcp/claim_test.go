package dcp

import (
	"bytes"
	"runtime"
	"testing"
	"weak"

	"github.com/ckpt-dev/ckpt/formats/pickle"
)

// TestUnreadClaimsCollected: the items claimed from a dict the pickle discards, which the
// parser never visits, are collected with the dict while the decode goes on. The parser
// once kept every claim in a table by dict to the end of the decode: a .metadata of many
// discarded dicts of records held all their items for nothing.
func TestUnreadClaimsCollected(t *testing.T) {
	str := func(s string) []byte { return append([]byte{0x8c, byte(len(s))}, s...) }
	var b bytes.Buffer
	b.Write([]byte{0x80, 4})
	for range 3 {
		// {"w": BytesStorageMetadata()}: state_dict_metadata's shape, then POP.
		b.WriteByte('}')
		b.Write(str("w"))
		b.Write(str(modMetadata))
		b.Write(str(clsBytes))
		b.Write([]byte{0x93, ')', 0x81, '}', 'b', 's', '0'})
		// {"k": ("k",)}: planner_data's shape, then POP.
		b.WriteByte('}')
		b.Write(str("k"))
		b.Write(str("k"))
		b.Write([]byte{0x85, 's', '0'})
	}
	b.Write([]byte{'N', '.'})

	p := &parser{file: "discarded.metadata", ints: map[string][]int64{}}
	opts := p.streamOptions()
	var claims []weak.Pointer[claim]
	opts.SetItem = func(d *pickle.Dict, k, v pickle.Value) (bool, error) {
		took, err := p.setItem(d, k, v)
		if c := claimOf(d); took && c != nil {
			claims = append(claims, weak.Make(c))
		}
		return took, err
	}
	dec := pickle.NewDecoder(b.Bytes(), opts)
	if v, err := dec.Decode(); err != nil || v != (pickle.None{}) {
		t.Fatalf("Decode = %v, %v; want None", v, err)
	}
	if len(claims) != 6 {
		t.Fatalf("%d items claimed, want 6", len(claims))
	}
	runtime.GC()
	for i, c := range claims {
		if c.Value() != nil {
			t.Errorf("claim %d of a discarded dict is held", i)
		}
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(dec)
}
