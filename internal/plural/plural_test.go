package plural

import "testing"

func TestOf(t *testing.T) {
	for _, c := range []struct {
		n          int
		noun, want string
	}{
		{1, "tensor", "1 tensor"},
		{0, "tensor", "0 tensors"},
		{2, "tensor", "2 tensors"},
		{1, "entry", "1 entry"},
		{51, "entry", "51 entries"},
		{2, "key", "2 keys"},
		{3, "match", "3 matches"},
		{2, "bias", "2 biases"},
		{2, "box", "2 boxes"},
		{-1, "problem", "-1 problems"},
	} {
		if got := Of(c.n, c.noun); got != c.want {
			t.Errorf("Of(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}
