package remap

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// castGolden is testdata/cast/expected.json, torch's own casts (testdata/cast/gen.py).
type castGolden struct {
	Torch  string              `json:"torch"`
	Inputs map[string][]string `json:"inputs"`
	Casts  map[string]struct {
		SHA256  string   `json:"sha256"`
		Outputs []string `json:"outputs"`
	} `json:"casts"`
}

// TestCastMatchesTorch checks every --dtype cast between float16, bfloat16, float32 and
// float64 against torch's casting of a contiguous tensor: all 65 536 values of each 16-bit
// source, and thousands of special float32 and float64 patterns (NaN payloads, signalling
// NaNs, subnormals, rounding midpoints, overflow), bit for bit.
func TestCastMatchesTorch(t *testing.T) {
	b, err := os.ReadFile("../testdata/cast/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var g castGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Casts) != 12 {
		t.Fatalf("%d casts in the golden file, want 12", len(g.Casts))
	}
	for pair, want := range g.Casts {
		t.Run(pair, func(t *testing.T) {
			names := strings.Split(pair, "->")
			from, _ := statedict.ParseDType(names[0])
			to, _ := statedict.ParseDType(names[1])
			fs, ts := from.Size(), to.Size()
			var src []byte
			if in, ok := g.Inputs[names[0]]; ok {
				for _, h := range in {
					v, err := strconv.ParseUint(h, 16, 64)
					if err != nil {
						t.Fatal(err)
					}
					src = binary.LittleEndian.AppendUint64(src, v)[:len(src)+fs]
				}
			} else {
				for v := range 65536 {
					src = binary.LittleEndian.AppendUint16(src, uint16(v))
				}
			}
			st := statedict.NewMappedStorage("0", "cpu", from, src)
			cast, err := castStorage(st, from, to)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, cast.Size)
			if _, err := cast.ReadAt(out, 0); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(out)
			if hex.EncodeToString(sum[:]) == want.SHA256 {
				return
			}
			n := len(src) / fs
			bad := 0
			for i := range n {
				in := leUint(src[i*fs:], fs)
				got := leUint(out[i*ts:], ts)
				var exp uint64
				if want.Outputs != nil {
					exp, _ = strconv.ParseUint(want.Outputs[i], 16, 64)
				} else {
					continue
				}
				if got != exp {
					if bad++; bad <= 10 {
						t.Errorf("%s %x → %x, torch %s gives %x", names[0], in, got, g.Torch, exp)
					}
				}
			}
			t.Errorf("output differs from torch %s's (%d differing elements listed of the specials; 16-bit sources are checked by hash only)", g.Torch, bad)
		})
	}
}

func leUint(b []byte, size int) uint64 {
	var buf [8]byte
	copy(buf[:], b[:size])
	return binary.LittleEndian.Uint64(buf[:])
}
