package codec

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

// castGolden is testdata/cast/expected.json: the SHA-256 of torch's own casts of the
// sources testdata/cast/gen.py describes.
type castGolden struct {
	Torch        string            `json:"torch"`
	CPU          string            `json:"cpu_capability"`
	Float64Extra []string          `json:"float64_extra"`
	Casts        map[string]string `json:"casts"`
}

// castSources returns the little-endian source bytes of each dtype, as gen.py builds them.
func castSources(t *testing.T, g castGolden) map[string][]byte {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile("../testdata/quant/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var u16 []byte
	for v := range 65536 {
		u16 = binary.LittleEndian.AppendUint16(u16, uint16(v))
	}
	f64 := read("float64.inputs")
	for _, h := range g.Float64Extra {
		v, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		f64 = binary.LittleEndian.AppendUint64(f64, v)
	}
	return map[string][]byte{"float16": u16, "bfloat16": u16, "float32": read("encode.inputs"), "float64": f64}
}

// TestCastMatchesTorch checks every --dtype cast between float16, bfloat16, float32 and
// float64 against torch casting a contiguous tensor, bit for bit: all 65 536 values of each
// 16-bit source, and tens of thousands of float32 and float64 boundary patterns (NaN payloads,
// signalling NaNs, subnormals, rounding ties, overflow thresholds, NaNs in the tail torch
// converts with its scalar code).
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
	sources := castSources(t, g)
	for pair, want := range g.Casts {
		t.Run(pair, func(t *testing.T) {
			names := strings.Split(pair, "->")
			from, _ := statedict.ParseDType(names[0])
			to, _ := statedict.ParseDType(names[1])
			st := statedict.NewMappedStorage("0", "cpu", from, sources[names[0]])
			cast, err := CastStorage(st, from, to)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, cast.Size)
			if _, err := cast.ReadAt(out, 0); err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(out); hex.EncodeToString(sum[:]) != want {
				t.Errorf("%d elements cast differ from torch %s (%s); `scripts/oracle python testdata/cast/gen.py` shows torch's values",
					len(out)/to.Size(), g.Torch, g.CPU)
			}
		})
	}
}
