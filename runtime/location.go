package runtime

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// TPU is the device tag for TorchTPU storages. Under TorchTPU each process owns one device,
// so the process-local "tpu" tag (no index) is what torch.load hands to the registered tpu
// backend, which places the storage on the process's own device.
const TPU = "tpu"

// knownTag matches the location tags torch writes: cpu, cuda[:N], xla:N, mps, meta, tpu[:N],
// and other privateuse1/accelerator backends (npu:0, xpu:1, hpu:0, mtia:0).
var knownTag = regexp.MustCompile(`^(cpu|mps|meta|(cuda|xla|tpu|npu|xpu|hpu|mtia|privateuseone)(:[0-9]+)?)$`)

// ValidTag reports whether tag is a device tag torch can restore.
func ValidTag(tag string) bool { return knownTag.MatchString(tag) }

// MapLocation is torch.load's map_location as a conversion applies it to the device tag
// every storage was saved with: one tag for every storage, or a table of exact tags, as
// torch's dict map_location (tags the table does not list are kept).
type MapLocation struct {
	// To is the tag of every storage when Table is nil.
	To string
	// Table maps saved tags to the tags written.
	Table map[string]string
}

// maxMapLocation bounds a map_location's text: a table of every device of a pod fits.
const maxMapLocation = 1 << 16

// ParseMapLocation reads a map_location: a single tag every storage goes to ("tpu", "cpu",
// "tpu:0"), or a table "cuda:0=tpu,cuda:1=tpu" of exact tags.
func ParseMapLocation(s string) (*MapLocation, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, fmt.Errorf("empty")
	case len(s) > maxMapLocation:
		return nil, fmt.Errorf("%d bytes, more than the %d a table of every device needs", len(s), maxMapLocation)
	case !strings.Contains(s, "="):
		if !ValidTag(s) {
			return nil, fmt.Errorf("%q is not a device tag (cpu, tpu, tpu:N, cuda:N, …)", s)
		}
		return &MapLocation{To: s}, nil
	}
	table := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !ValidTag(from) || !ValidTag(to) {
			return nil, fmt.Errorf("entry %q is not FROM=TO with device tags", pair)
		}
		if _, dup := table[from]; dup {
			return nil, fmt.Errorf("%s is mapped twice", from)
		}
		table[from] = to
	}
	return &MapLocation{Table: table}, nil
}

// Map is the tag a storage saved with tag saved gets.
func (m *MapLocation) Map(saved string) string {
	if m.Table == nil {
		return m.To
	}
	if to, ok := m.Table[saved]; ok {
		return to
	}
	return saved
}

// String writes m as ParseMapLocation reads it (a table in the order of its saved tags).
func (m *MapLocation) String() string {
	if m.Table == nil {
		return m.To
	}
	keys := make([]string, 0, len(m.Table))
	for k := range m.Table {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m.Table[k]
	}
	return strings.Join(keys, ",")
}
