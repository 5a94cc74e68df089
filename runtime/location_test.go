package runtime

import (
	"strings"
	"testing"
)

func TestParseMapLocation(t *testing.T) {
	cases := []struct {
		flag, tag, want, err string
	}{
		{"tpu", "cuda:0", "tpu", ""},
		{"cpu", "cuda:3", "cpu", ""},
		{"tpu:1", "cpu", "tpu:1", ""},
		{"cuda:0=tpu,cuda:1=tpu", "cuda:1", "tpu", ""},
		{"cuda:0=tpu", "cuda:1", "cuda:1", ""}, // exact tags, as torch's dict map_location
		{"gpu", "", "", "not a device tag"},
		{"cuda:0=tpu,cuda:0=cpu", "", "", "twice"},
		{"cuda=", "", "", "FROM=TO"},
		{"", "", "", "empty"},
		{strings.Repeat("cuda:0=tpu,", 10000), "", "", "more than"},
	}
	for _, c := range cases {
		m, err := ParseMapLocation(c.flag)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%.40q: error %v, want %q", c.flag, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.flag, err)
		}
		if got := m.Map(c.tag); got != c.want {
			t.Errorf("%q maps %s to %s, want %s", c.flag, c.tag, got, c.want)
		}
		if back, err := ParseMapLocation(m.String()); err != nil || back.String() != m.String() {
			t.Errorf("%q written as %q reads back as %v (%v)", c.flag, m.String(), back, err)
		}
	}
}
