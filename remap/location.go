// Package remap is ckpt's map_location: it rewrites a checkpoint tree for its destination —
// device tags, dtypes, tensor names, the sub-tree to keep and what to drop — without reading
// tensor bytes. Storages stay shared: tensors that shared a storage before share the remapped
// one, so tied weights stay tied.
package remap

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Placement decides the device tag recorded for a tensor's storage, seeing the tensor's
// flattened name, its dtype and shape, and the tag it was saved with (t.Storage.Location).
// A storage shared by several tensors is placed once, by the first of them the walk meets.
type Placement func(name string, t *statedict.Tensor) (string, error)

// TPU is the device tag for TorchTPU storages. Under TorchTPU each process owns one device,
// so the process-local "tpu" tag (no index) is what torch.load hands to the registered tpu
// backend, which places the storage on the process's own device.
const TPU = "tpu"

// knownTag matches the location tags torch writes: cpu, cuda[:N], xla:N, mps, meta, tpu[:N],
// and other privateuse1/accelerator backends (npu:0, xpu:1, hpu:0, mtia:0).
var knownTag = regexp.MustCompile(`^(cpu|mps|meta|(cuda|xla|tpu|npu|xpu|hpu|mtia|privateuseone)(:[0-9]+)?)$`)

// ValidTag reports whether tag is a device tag torch can restore.
func ValidTag(tag string) bool { return knownTag.MatchString(tag) }

// ParseMapLocation parses the --map-location flag: a single tag every storage goes to
// ("tpu", "cpu", "tpu:0"), or a table "cuda:0=tpu,cuda:1=tpu" (exact tags, as torch's dict
// map_location; tags not listed are kept).
func ParseMapLocation(s string) (Placement, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, optionError("map-location", fmt.Errorf("empty"))
	}
	if !strings.Contains(s, "=") {
		if !ValidTag(s) {
			return nil, optionError("map-location", fmt.Errorf("%q is not a device tag (cpu, tpu, tpu:N, cuda:N, …)", s))
		}
		return func(string, *statedict.Tensor) (string, error) { return s, nil }, nil
	}
	table := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !ValidTag(from) || !ValidTag(to) {
			return nil, optionError("map-location", fmt.Errorf("entry %q is not FROM=TO with device tags", pair))
		}
		if _, dup := table[from]; dup {
			return nil, optionError("map-location", fmt.Errorf("%s is mapped twice", from))
		}
		table[from] = to
	}
	return func(_ string, t *statedict.Tensor) (string, error) {
		if to, ok := table[t.Storage.Location]; ok {
			return to, nil
		}
		return t.Storage.Location, nil
	}, nil
}
