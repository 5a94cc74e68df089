package verify

import (
	"strings"
	"testing"
)

// TestLogitsReportCounts: the summary counts positions ("32/32 agree", "top-1 31/32"),
// never prints a fraction that reads as a count ("1 agree") (issue 28, item 4).
func TestLogitsReportCounts(t *testing.T) {
	r := &LogitsReport{Positions: make([]Position, 32), Agree: 1, Top1: 31.0 / 32}
	got := r.String()
	for _, want := range []string{"32/32 agree;", "top-1 31/32,", "— PASS"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, " 1 agree") || strings.Contains(got, "positions,") {
		t.Errorf("summary %q prints fractions", got)
	}
}
