// Package remap is ckpt's map_location: it rewrites a checkpoint tree for its destination —
// device tags, dtypes, tensor names, the sub-tree to keep and what to drop — without reading
// tensor bytes. Storages stay shared: tensors that shared a storage before share the remapped
// one, so tied weights stay tied.
package remap

import (
	"fmt"
	"regexp"
	"strings"
)

// LocationFunc maps a saved location tag ("cuda:0") to the tag to record.
type LocationFunc func(tag string) (string, error)

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
func ParseMapLocation(s string) (LocationFunc, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty --map-location")
	}
	if !strings.Contains(s, "=") {
		if !ValidTag(s) {
			return nil, fmt.Errorf("--map-location %q is not a device tag (cpu, tpu, tpu:N, cuda:N, …)", s)
		}
		return func(string) (string, error) { return s, nil }, nil
	}
	table := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !ValidTag(from) || !ValidTag(to) {
			return nil, fmt.Errorf("--map-location entry %q is not FROM=TO with device tags", pair)
		}
		if _, dup := table[from]; dup {
			return nil, fmt.Errorf("--map-location maps %s twice", from)
		}
		table[from] = to
	}
	return func(tag string) (string, error) {
		if to, ok := table[tag]; ok {
			return to, nil
		}
		return tag, nil
	}, nil
}
