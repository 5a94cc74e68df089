package verify

import (
	"math"
	"strings"
	"testing"
)

// TestCompareLogits checks the verdict rules on hand-made logits: equal logits agree, a
// position far from both references disagrees, one far from the float32 source but close
// to the source on a TPU agrees by it, a flipped near tie agrees, a NaN never does, and
// MinAgree decides.
func TestCompareLogits(t *testing.T) {
	base := []float32{4, 1, 0, -1, 3.99, 2} // top-1 token 0, token 4 a near tie
	rows := func(n int, edit func(t int, row []float32)) []float32 {
		var out []float32
		for i := range n {
			r := append([]float32{}, base...)
			if edit != nil {
				edit(i, r)
			}
			out = append(out, r...)
		}
		return out
	}
	th := DefaultThresholds()
	tokens := make([]int, 10)
	for _, tc := range []struct {
		name          string
		tpu, got      func(t int, row []float32)
		ok            bool
		agree, byTPU  float64
		failedMention string
	}{
		{"equal", nil, nil, true, 1, 0, ""},
		{"near tie flipped", nil, func(t int, r []float32) { r[4] = 4.01 }, true, 1, 0, ""},
		{"one position far, nine agree", nil, func(t int, r []float32) {
			if t == 3 {
				r[1] = 9
			}
		}, true, 0.9, 0, ""},
		{"two positions far", nil, func(t int, r []float32) {
			if t == 3 || t == 7 {
				r[1] = 9
			}
		}, false, 0.8, 0, "position 3"},
		{"moved by the TPU's arithmetic", func(t int, r []float32) { r[1] = 9 }, func(t int, r []float32) { r[1] = 9 }, true, 1, 10, ""},
		{"NaN", nil, func(t int, r []float32) { r[2] = float32(math.NaN()) }, false, 0, 0, "kl NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := CompareLogits(tokens, len(base), rows(10, nil), rows(10, tc.tpu), rows(10, tc.got), th)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() != tc.ok || math.Abs(rep.Agree-tc.agree) > 1e-9 || float64(rep.ByTPU) != tc.byTPU ||
				tc.failedMention != "" && !strings.Contains(strings.Join(rep.Failed, "; "), tc.failedMention) {
				t.Fatalf("ok %v agree %v by TPU %d failed %q", rep.OK(), rep.Agree, rep.ByTPU, rep.Failed)
			}
		})
	}
	if _, err := CompareLogits(tokens, 5, rows(10, nil), nil, rows(10, nil), th); err == nil {
		t.Error("mismatched sizes accepted")
	}
}
