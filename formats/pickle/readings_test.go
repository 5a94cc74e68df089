package pickle

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// framed wraps body in a FRAME of frameLen bytes (len(body) when negative), after PROTO 4.
func framed(frameLen int, body []byte) *pb {
	if frameLen < 0 {
		frameLen = len(body)
	}
	p := new(pb).proto(4).op(opFrame).u64(uint64(frameLen))
	p.Write(body)
	return p
}

// TestScanReadings: where the CPython versions torch runs on read a pickle differently —
// an argument that does not fit the rest of its FRAME (read from after the frame by
// CPython before 3.14.7 / 3.13.15 on a file without peek(), read on from bytes, refused by
// later versions), a frame running past STOP — the scan lists the globals of every reading
// and an Unknown FRAME finding; pickles the readings agree on get none. (The hostile
// fixture of cmd/ckpt's TestScanRound3 shows torch.load reaching the payload through the
// older reading.)
func TestScanReadings(t *testing.T) {
	payload := new(pb).sstr("posix").sstr("system").op(opStackGlobal).sstr("touch /tmp/x").op(opTuple1, opReduce).Bytes()
	// A SHORT_BINUNICODE of 32 bytes with 5 in the frame: read on, the string takes 27
	// bytes after the frame and a SHORT_BINBYTES then swallows the payload; read from
	// after the frame, the string is those 32 bytes and the payload runs.
	after := append([]byte("ABCDEFGHIJKLMNOPQRSTUVWXYZ0"), opShortBinBytes, byte(3+len(payload)), 'z', 'z', 'z')
	straddleStr := framed(-1, []byte{opShortBinUnicode, 32, 'a', 'b', 'c', 'd', 'e'})
	straddleStr.Write(after)
	straddleStr.Write(payload)
	straddleStr.op(opStop)

	// A GLOBAL whose module line runs past the frame: "buil" + "posix" read on, "posix"
	// from after the frame.
	straddleLine := framed(-1, []byte("cbuil"))
	straddleLine.WriteString("posix\nsystem\n.")

	// A BINBYTES payload across the frame's end: _Unpickler_ReadInto reads on in every
	// version (later ones refuse it): no divergence.
	bytesAcross := framed(-1, []byte{opShortBinBytes, 8, '1', '2'})
	bytesAcross.WriteString("345678.")

	// A frame that runs past its STOP: the next load starts after the STOP or after the
	// frame.
	pastStop := framed(8, []byte{opNone, opStop})
	pastStop.WriteString("cposix\n")

	// A frame starting inside the previous one.
	nested := new(pb).proto(4).op(opFrame).u64(12).op(opFrame).u64(20).op(opNone, opStop)
	nested.Write(make([]byte, 20))

	clean := framed(-1, new(pb).sstr("collections").sstr("OrderedDict").op(opStackGlobal, opEmptyTuple, opReduce, opStop).Bytes())

	tests := []struct {
		name    string
		data    []byte
		globals []string // names listed, in any order
		finding bool     // an Unknown FRAME finding
	}{
		{"argument across the frame end", straddleStr.Bytes(), []string{"posix.system"}, true},
		{"text line across the frame end", straddleLine.Bytes(), []string{"builposix.system", "posix.system"}, true},
		{"bytes payload across the frame end", bytesAcross.Bytes(), nil, false},
		{"frame past STOP", pastStop.Bytes(), nil, true},
		{"frame inside a frame", nested.Bytes(), nil, true},
		{"framed as CPython writes", clean.Bytes(), []string{"collections.OrderedDict"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ScanOne(tt.data)
			if err != nil && tt.name != "frame inside a frame" {
				t.Fatalf("ScanOne: %v", err)
			}
			var names []string
			finding := false
			for _, g := range rep.Globals {
				if g.Global == (Global{}) {
					if g.Opcode != "FRAME" || g.Class != Unknown || !strings.Contains(g.Why, "FRAME") {
						t.Errorf("finding %+v", g)
					}
					finding = true
					continue
				}
				names = append(names, g.Global.String())
			}
			slices.Sort(names)
			want := slices.Clone(tt.globals)
			slices.Sort(want)
			if !slices.Equal(names, want) || finding != tt.finding {
				t.Errorf("globals %q, FRAME finding %v; want %q, %v\n%+v", names, finding, want, tt.finding, rep.Globals)
			}
			if tt.finding && rep.Worst() < Unknown {
				t.Errorf("worst %v: a pickle read differently must be refused", rep.Worst())
			}
		})
	}
	t.Run("dangerous through the other reading", func(t *testing.T) {
		rep, _ := ScanOne(straddleStr.Bytes())
		if rep.Worst() != Unsafe {
			t.Errorf("worst %v, want dangerous: the older reading calls posix.system", rep.Worst())
		}
	})
}

// TestScanBeyondLimits: a pickle deeper than the scanner follows is a pickle all the same
// (Python reads on), with an Unknown finding at the opcode where the scanner stopped.
func TestScanBeyondLimits(t *testing.T) {
	deep := []byte(strings.Repeat("(", DefaultLimits().MaxMarkDepth+1) + "cposix\nsystem\n.")
	long := []byte(strings.Repeat("N", DefaultLimits().MaxStack+1) + ".")
	for name, data := range map[string][]byte{"MaxMarkDepth": deep, "MaxStack": long} {
		t.Run(name, func(t *testing.T) {
			rep, err := ScanOne(data)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != name {
				t.Fatalf("err %v, want a %s LimitError", err, name)
			}
			if len(rep.Globals) != 1 || rep.Globals[0].Class != Unknown || rep.Globals[0].Global != (Global{}) || !strings.Contains(rep.Globals[0].Why, "limits") {
				t.Fatalf("globals %+v, want one Unknown finding", rep.Globals)
			}
			if rep.Worst() != Unknown {
				t.Errorf("worst %v", rep.Worst())
			}
		})
	}
}
