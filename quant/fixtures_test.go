package quant_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// fixturesDir holds the quantized checkpoints testdata/quantized/gen.py writes and
// expected.json, the reference dequantizations' hashes.
const fixturesDir = "../testdata/quantized"

// expectedFixture is one fixture's entry of expected.json.
type expectedFixture struct {
	Groups []struct {
		Name    string   `json:"name"`
		Scheme  string   `json:"scheme"`
		Shape   []int64  `json:"shape"`
		Members []string `json:"members"`
	} `json:"groups"`
	Aux    []string                     `json:"aux"`
	SHA256 map[string]map[string]string `json:"sha256"`
}

var outDTypes = []statedict.DType{statedict.BFloat16, statedict.Float16, statedict.Float32}

// TestFixtures dequantizes every group of every fixture to bfloat16, float16 and
// float32 and checks the bytes against the SHA-256 of what the reference code
// computed in the oracle (transformers' Fp8Dequantize and convert_moe_packed_tensors,
// DeepSeek's formula for partial blocks, the compressed-tensors and ModelOpt
// formulas in torch).
func TestFixtures(t *testing.T) {
	checkFixtures(t, fixturesDir, false)
}

// checkFixtures runs the fixture checks on the output of gen.py in dir; with full,
// mismatches are located element by element in <fixture>.expected.safetensors.
func checkFixtures(t *testing.T, dir string, full bool) {
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]expectedFixture
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(expected))
	for n := range expected {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 8 {
		t.Fatalf("only %d fixtures", len(names))
	}
	for _, name := range names {
		want := expected[name]
		t.Run(name, func(t *testing.T) {
			ck, err := formats.Open(context.Background(), filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			plan := detect(t, ck)
			if len(plan.Groups) != len(want.Groups) {
				t.Fatalf("%d groups, want %d", len(plan.Groups), len(want.Groups))
			}
			sort.Strings(plan.Aux)
			if !slices.Equal(plan.Aux, want.Aux) && len(plan.Aux)+len(want.Aux) > 0 {
				t.Errorf("runtime-only tensors %v, want %v", plan.Aux, want.Aux)
			}
			var ref *statedict.Checkpoint
			if full {
				if ref, err = formats.Open(context.Background(), filepath.Join(dir, name+".expected.safetensors")); err != nil {
					t.Fatal(err)
				}
				defer ref.Close()
			}
			byName := map[string]int{}
			for i, w := range want.Groups {
				byName[w.Name] = i
			}
			for _, g := range plan.Groups {
				i, ok := byName[g.Name]
				if !ok {
					t.Errorf("unexpected group %s", g.Name)
					continue
				}
				w := want.Groups[i]
				if string(g.Scheme) != w.Scheme || !slices.Equal(g.Shape, w.Shape) || !slices.Equal(g.Members(), w.Members) {
					t.Errorf("group %s %s %v %v, want %s %s %v %v", g.Name, g.Scheme, g.Shape, g.Members(), w.Name, w.Scheme, w.Shape, w.Members)
					continue
				}
				for _, dt := range outDTypes {
					got := dequantized(t, g, dt)
					sum := sha256.Sum256(got)
					if hex.EncodeToString(sum[:]) == want.SHA256[g.Name][dt.String()] {
						continue
					}
					if ref == nil {
						t.Errorf("%s as %s: bytes differ from the reference's (regenerate with --full to locate)", g.Name, dt)
						continue
					}
					diff(t, g.Name, dt, got, refBytes(t, ref, g.Name+"|"+dt.String()))
				}
			}
		})
	}
}

// detect loads ck's config and detects its groups.
func detect(t *testing.T, ck *statedict.Checkpoint) *quant.Plan {
	t.Helper()
	cfg, err := quant.LoadConfig(ck)
	if err != nil {
		t.Fatal(err)
	}
	tensors, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := quant.Detect(cfg, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// dequantized returns g's logical tensor in dtype dt as contiguous bytes.
func dequantized(t *testing.T, g *quant.Group, dt statedict.DType) []byte {
	t.Helper()
	out, err := g.Dequantize(dt)
	if err != nil {
		t.Fatal(err)
	}
	if out.DType != dt || !slices.Equal(out.Shape, g.Shape) {
		t.Fatalf("%s: %s %v", g.Name, out.DType, out.Shape)
	}
	var buf bytes.Buffer
	if _, err := out.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func refBytes(t *testing.T, ref *statedict.Checkpoint, name string) []byte {
	t.Helper()
	d := ref.Root.(*statedict.Dict)
	v, ok := d.Get(name)
	if !ok {
		t.Fatalf("reference has no %s", name)
	}
	var buf bytes.Buffer
	if _, err := v.(*statedict.Tensor).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// diff reports the first elements where got and want differ.
func diff(t *testing.T, name string, dt statedict.DType, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s as %s: %d bytes, reference %d", name, dt, len(got), len(want))
		return
	}
	es, shown, total := dt.Size(), 0, 0
	for i := 0; i < len(got); i += es {
		if bytes.Equal(got[i:i+es], want[i:i+es]) {
			continue
		}
		total++
		if shown < 5 {
			shown++
			t.Errorf("%s as %s: element %d = %#x, reference %#x", name, dt, i/es, bits(got[i:i+es]), bits(want[i:i+es]))
		}
	}
	t.Errorf("%s as %s: %d elements differ", name, dt, total)
}

func bits(b []byte) uint32 {
	if len(b) == 2 {
		return uint32(binary.LittleEndian.Uint16(b))
	}
	return binary.LittleEndian.Uint32(b)
}
