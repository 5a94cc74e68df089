package codec_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// TestFloat32sMatchesTorch decodes every tensor of the every-dtype fixture and compares it
// with torch's own t.float(), bit for bit (NaN payloads included).
func TestFloat32sMatchesTorch(t *testing.T) {
	o := oracle.Require(t)
	out, err := o.Python("testdata/codec/float32s.py", "testdata/torch/dtypes.pt")
	if err != nil {
		t.Fatal(err)
	}
	ck, err := formats.Open(context.Background(), "../testdata/torch/dtypes.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 15 {
		t.Fatalf("torch converted only %d tensors", len(lines))
	}
	for _, line := range lines {
		name, want, _ := strings.Cut(line, " ")
		tensor, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := codec.Float32s(tensor)
		if err != nil {
			t.Errorf("%s (%s): %v", name, tensor.DType, err)
			continue
		}
		b := make([]byte, 0, 4*len(vals))
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s (%s): decoded values differ from torch's t.float()", name, tensor.DType)
		}
	}
}
