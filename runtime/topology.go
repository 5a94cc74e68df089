package runtime

import (
	"fmt"
	"strconv"
	"strings"
)

// Topology is a TPU slice: its generation, the chips along each axis of its interconnect,
// and what that makes — chips, devices (one TorchTPU process each), hosts.
//
// Devices are numbered host-major, as torchrun numbers ranks (RANK = host × devices per host
// + local rank): host h drives devices [h·DevicesPerHost, (h+1)·DevicesPerHost). On TPU7x
// device d is TensorCore d mod 2 of chip d / 2.
type Topology struct {
	Gen *Generation
	// Shape is the chips along each interconnect axis: 2 axes on v5e and v6e ("4x4"), 3
	// otherwise ("2x2x1").
	Shape []int
	// Chips, Devices and Hosts count the slice.
	Chips, Devices, Hosts int
}

// maxAxis bounds each topology axis (the largest pods are 16x16x24 chips; 9216 chips in
// all): anything larger is a typo, not a slice.
const maxAxis = 1 << 14

// ParseTopology reads a slice description:
//
//   - a Cloud TPU accelerator type, GEN-N: v4-8, v5litepod-16 (or v5e-16), v5p-32, v6e-8
//     (or trillium-8), tpu7x-8 (or v7x-8, ironwood-8). N counts TensorCores on v4, v5p and
//     TPU7x (v5p-32 is 16 chips; tpu7x-8 is 4 chips and 8 devices) and chips on v5e and
//     v6e (v6e-8 is 8 chips). The chips are laid out in the slice shape Cloud TPU gives
//     that count (v5p-32: 2x2x4; v6e-16: 4x4).
//   - GEN:AxBxC, a topology string of chips along each axis as gcloud and GKE write it
//     (v5p:2x2x2, v6e:4x4, tpu7x:2x2x1).
//   - GEN:a,b,c, the TORCH_TPU_TOPOLOGY form TorchTPU's launchers export (v6e:2,4,1); on
//     TPU7x it has four entries, the last the 2 cores of each chip (tpu7x:2,2,1,2).
func ParseTopology(s string) (*Topology, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	if gen, shape, ok := strings.Cut(in, ":"); ok {
		g, err := LookupGeneration(gen)
		if err != nil {
			return nil, fmt.Errorf("topology %q: %w", s, err)
		}
		dims, err := parseShape(g, shape)
		if err != nil {
			return nil, fmt.Errorf("topology %q: %w", s, err)
		}
		return NewTopology(g, dims)
	}
	i := strings.LastIndexByte(in, '-')
	if i < 0 {
		return nil, fmt.Errorf("topology %q: want an accelerator type (v5p-32, v6e-8, tpu7x-8), GEN:AxBxC or GEN:a,b,c", s)
	}
	g, err := LookupGeneration(in[:i])
	if err != nil {
		return nil, fmt.Errorf("topology %q: %w", s, err)
	}
	n, err := strconv.Atoi(in[i+1:])
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("topology %q: %q is not a positive count", s, in[i+1:])
	}
	chips := n
	if g.TypeCountsCores {
		if n%g.TensorCoresPerChip != 0 {
			return nil, fmt.Errorf("topology %q: %s-N counts TensorCores, %d per chip; %d is not a whole number of chips", s, g.AcceleratorPrefix, g.TensorCoresPerChip, n)
		}
		chips = n / g.TensorCoresPerChip
	}
	if chips > g.MaxChips {
		return nil, fmt.Errorf("topology %q: %d chips; a %s pod has %d", s, chips, g.Name, g.MaxChips)
	}
	dims, ok := defaultShape(g.TopologyDims, chips)
	if !ok {
		return nil, fmt.Errorf("topology %q: %d chips is not a power of two; give the shape: %s:AxB%s", s, chips, g.Name, map[bool]string{true: "xC", false: ""}[g.TopologyDims == 3])
	}
	return NewTopology(g, dims)
}

// parseShape reads "2x2x1" (chips per axis) or "2,2,1" (TORCH_TPU_TOPOLOGY) for g.
func parseShape(g *Generation, s string) ([]int, error) {
	sep, torchForm := "x", strings.Contains(s, ",")
	if torchForm {
		sep = ","
	}
	parts := strings.Split(s, sep)
	dims := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 || n > maxAxis {
			return nil, fmt.Errorf("axis %q is not a chip count between 1 and %d", p, maxAxis)
		}
		dims[i] = n
	}
	switch {
	case torchForm && g.DevicesPerChip > 1:
		// TorchTPU's TPU7x topologies append the cores of each chip as a fourth axis.
		if len(dims) != 4 || dims[3] != g.DevicesPerChip {
			return nil, fmt.Errorf("TORCH_TPU_TOPOLOGY for %s has 4 entries, the last the %d cores per chip (2,2,1,%d)", g.Name, g.DevicesPerChip, g.DevicesPerChip)
		}
		return dims[:3], nil
	case torchForm:
		if len(dims) != 3 {
			return nil, fmt.Errorf("TORCH_TPU_TOPOLOGY has 3 entries (2,2,1)")
		}
		if g.TopologyDims == 2 {
			// TorchTPU writes 2D slices with a trailing axis (v6e-8: 2,4,1) and, for v5e-8,
			// as 2,2,2: only the chip count carries over to the 2D torus.
			chips := dims[0] * dims[1] * dims[2]
			d, ok := defaultShape(2, chips)
			if !ok {
				return nil, fmt.Errorf("%d chips is not a %s slice; give the shape as %s:AxB", chips, g.Name, g.Name)
			}
			return d, nil
		}
		return dims, nil
	case len(dims) != g.TopologyDims:
		return nil, fmt.Errorf("%s topologies have %d axes (%s)", g.Name, g.TopologyDims, map[int]string{2: "4x4", 3: "2x2x1"}[g.TopologyDims])
	}
	return dims, nil
}

// defaultShape is the slice shape Cloud TPU gives a power-of-two chip count: 2D slices
// double their shorter axis (1x1, 2x2, 2x4, 4x4, 4x8, …, 16x16 for v5e and v6e); 3D slices
// start at TorchTPU's single-host shapes (1 chip 1x1x1, 2 chips 1x2x1, 4 chips 2x2x1) and
// then double their shortest axis, the last of equals first (2x2x2, 2x2x4, 2x4x4, 4x4x4,
// 4x4x8, … as in the v5p configuration table).
func defaultShape(ndim, chips int) ([]int, bool) {
	if chips <= 0 || chips&(chips-1) != 0 {
		return nil, false
	}
	var d []int
	switch {
	case ndim == 2:
		d = []int{1, 1}
	case chips == 1:
		return []int{1, 1, 1}, true
	case chips == 2:
		return []int{1, 2, 1}, true
	default:
		d = []int{2, 2, 1}
	}
	for prod(d) < chips {
		j := len(d) - 1
		for i := len(d) - 1; i >= 0; i-- {
			if d[i] < d[j] {
				j = i
			}
		}
		d[j] *= 2
	}
	return d, true
}

func prod(d []int) int {
	p := 1
	for _, x := range d {
		p *= x
	}
	return p
}

// NewTopology builds the slice of generation g with the given chips per axis and counts its
// devices and hosts: one host for up to SingleHostChips chips, else ChipsPerHost chips per
// host.
func NewTopology(g *Generation, shape []int) (*Topology, error) {
	if len(shape) != g.TopologyDims {
		return nil, fmt.Errorf("%s topologies have %d axes, not %d", g.Name, g.TopologyDims, len(shape))
	}
	chips := 1
	for _, d := range shape {
		if d <= 0 || d > maxAxis {
			return nil, fmt.Errorf("topology axis %d is not between 1 and %d", d, maxAxis)
		}
		chips *= d
		if chips > g.MaxChips {
			return nil, fmt.Errorf("topology %s: more chips than a %s pod's %d", shapeString(shape), g.Name, g.MaxChips)
		}
	}
	hosts := 1
	if chips > g.SingleHostChips {
		if chips%g.ChipsPerHost != 0 {
			return nil, fmt.Errorf("topology %s: %d chips is not a whole number of %d-chip %s hosts", shapeString(shape), chips, g.ChipsPerHost, g.Name)
		}
		hosts = chips / g.ChipsPerHost
	}
	return &Topology{Gen: g, Shape: append([]int(nil), shape...), Chips: chips, Devices: chips * g.DevicesPerChip, Hosts: hosts}, nil
}

func shapeString(shape []int) string {
	s := make([]string, len(shape))
	for i, d := range shape {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, "x")
}

// ShapeString is the topology string of the chips, "2x2x4".
func (t *Topology) ShapeString() string { return shapeString(t.Shape) }

// AcceleratorType is the Cloud TPU name of a slice of this size: v5p-32, v6e-8, tpu7x-8.
func (t *Topology) AcceleratorType() string {
	n := t.Chips
	if t.Gen.TypeCountsCores {
		n *= t.Gen.TensorCoresPerChip
	}
	return fmt.Sprintf("%s-%d", t.Gen.AcceleratorPrefix, n)
}

// String describes the slice: "v5p-32 (2x2x4)".
func (t *Topology) String() string { return t.AcceleratorType() + " (" + t.ShapeString() + ")" }

// DevicesPerHost is the number of devices (processes) on each host.
func (t *Topology) DevicesPerHost() int { return t.Devices / t.Hosts }

// HBMPerDevice is the HBM of one device in bytes.
func (t *Topology) HBMPerDevice() int64 { return t.Gen.HBMPerDevice() }

// Host is the host driving device (rank) d.
func (t *Topology) Host(d int) int { return d / t.DevicesPerHost() }

// HostDevices is the range of devices [first, first+n) host h drives.
func (t *Topology) HostDevices(h int) (first, n int) {
	n = t.DevicesPerHost()
	return h * n, n
}

// Chip is the chip holding device d and the device's index on it (its TensorCore on TPU7x).
func (t *Topology) Chip(d int) (chip, core int) {
	return d / t.Gen.DevicesPerChip, d % t.Gen.DevicesPerChip
}
