package formats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainerOutputRootHint: a Trainer output folder (checkpoint-STEP folders, no weights
// of its own) is no checkpoint, and the error names its checkpoints and the latest one to
// pass (issue 28, item 8).
func TestTrainerOutputRootHint(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"checkpoint-500", "checkpoint-1000", "checkpoint-90", "runs", "checkpoint-x"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Open(t.Context(), dir)
	want := "holding the checkpoints checkpoint-90, checkpoint-500, checkpoint-1000: name one, e.g. " + filepath.Join(dir, "checkpoint-1000") + " (the latest step)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}
