package runtime

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Mesh is a logical device mesh as torch's DeviceMesh has it: named axes with sizes, laid
// over the ranks 0..Size()-1 in row-major order (init_device_mesh builds
// torch.arange(world_size).view(shape)), so the last axis varies fastest. Since ranks are
// numbered host-major (Topology), the last axes stay within a host: put the
// communication-heavy axis (tp) last.
type Mesh struct {
	Axes []Axis
}

// Axis is one named mesh dimension.
type Axis struct {
	Name string `json:"name"`
	Size int    `json:"size"`
}

var axisName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// maxRanks bounds a mesh: larger than any TPU pod's device count.
const maxRanks = 1 << 16

// ParseMesh reads "fsdp=8" or "dp=2,fsdp=2,tp=2": axis names (lower-case identifiers, each
// once) with sizes, outermost first.
func ParseMesh(s string) (*Mesh, error) {
	m := &Mesh{}
	seen := map[string]bool{}
	size := 1
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		k, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || !axisName.MatchString(name) || err != nil || k <= 0 {
			return nil, fmt.Errorf("mesh %q: %q is not NAME=SIZE (fsdp=8, dp=2,fsdp=2,tp=2)", s, part)
		}
		if seen[name] {
			return nil, fmt.Errorf("mesh %q: axis %s twice", s, name)
		}
		seen[name] = true
		if size *= k; size > maxRanks {
			return nil, fmt.Errorf("mesh %q: more than %d ranks", s, maxRanks)
		}
		m.Axes = append(m.Axes, Axis{name, k})
	}
	return m, nil
}

// String writes the mesh as ParseMesh reads it.
func (m *Mesh) String() string {
	s := make([]string, len(m.Axes))
	for i, a := range m.Axes {
		s[i] = a.Name + "=" + strconv.Itoa(a.Size)
	}
	return strings.Join(s, ",")
}

// NDim is the number of axes.
func (m *Mesh) NDim() int { return len(m.Axes) }

// Size is the number of ranks.
func (m *Mesh) Size() int {
	n := 1
	for _, a := range m.Axes {
		n *= a.Size
	}
	return n
}

// Shape is the axis sizes, outermost first.
func (m *Mesh) Shape() []int {
	s := make([]int, len(m.Axes))
	for i, a := range m.Axes {
		s[i] = a.Size
	}
	return s
}

// DataParallel is how many ways the mesh splits the data: the product of its dp, fsdp and
// ep axes (torchtitan's data-parallel degree, dp_replicate × dp_shard, of which ep is
// borrowed), the number of per-rank data-loader states a run on it loads.
func (m *Mesh) DataParallel() int {
	n := 1
	for _, a := range m.Axes {
		switch AxisKinds[a.Name] {
		case KindDP, KindFSDP, KindEP:
			n *= a.Size
		}
	}
	return n
}

// Index is the position of the axis called name, or -1.
func (m *Mesh) Index(name string) int {
	for i, a := range m.Axes {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// Coord is rank's coordinate on each axis (DeviceMesh.get_coordinate on that rank).
func (m *Mesh) Coord(rank int) []int {
	c := make([]int, len(m.Axes))
	for i := len(m.Axes) - 1; i >= 0; i-- {
		c[i] = rank % m.Axes[i].Size
		rank /= m.Axes[i].Size
	}
	return c
}

// Rank is the rank at coordinate c.
func (m *Mesh) Rank(c []int) int {
	r := 0
	for i, a := range m.Axes {
		r = r*a.Size + c[i]
	}
	return r
}

// Check reports whether the mesh covers a topology's devices exactly: DTensor meshes span
// the whole world, one rank per device.
func (m *Mesh) Check(t *Topology) error {
	if m.Size() != t.Devices {
		return fmt.Errorf("mesh %s has %d ranks; %s has %d devices (%d chips × %d devices per chip)", m, m.Size(), t.AcceleratorType(), t.Devices, t.Chips, t.Gen.DevicesPerChip)
	}
	return nil
}
