package pickle

import (
	"os"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/fuzzopt"
)

// TestMain fuzzes without minimizing new inputs (fuzzopt.NoMinimize says why).
func TestMain(m *testing.M) {
	fuzzopt.NoMinimize()
	os.Exit(m.Run())
}
