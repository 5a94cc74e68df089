package manifest

import "github.com/ckpt-dev/ckpt/runtime"

// ConversionVersion is the version of the Conversion record this ckpt writes. A reader
// refuses a record of a version it does not know rather than guess what it says.
const ConversionVersion = 1

// Conversion records what a conversion was asked to do, in the terms of its options (package
// plan's Options and the runtime.Spec of its target), whatever front end asked: a library
// call records it as the CLI does. It is data: a reader validates and bounds it
// (plan.FromRecord) and never opens a file or runs anything it names.
type Conversion struct {
	Version int `json:"version"`
	// Target is the device, TPU generation, slice, mesh, plan rules and map_location.
	Target runtime.Spec `json:"target"`
	// Layout is the layout written ("torch", "safetensors", "hf", "dcp",
	// "safetensors-ranks").
	Layout string `json:"layout"`
	// DType and OptimizerDType are the casts of weights and of optimizer moments (dtype
	// names; empty: none).
	DType          string `json:"dtype,omitempty"`
	OptimizerDType string `json:"optimizer_dtype,omitempty"`
	// Dequantize is "", "all" or "auto".
	Dequantize    string   `json:"dequantize,omitempty"`
	StripWrappers bool     `json:"strip_wrappers"`
	PlainData     bool     `json:"plain_data"`
	Renames       []Rename `json:"renames,omitempty"`
	Select        string   `json:"select,omitempty"`
	// Drop are the regular expressions (Go syntax) of the entries dropped.
	Drop        []string `json:"drop,omitempty"`
	KeepCUDARNG bool     `json:"keep_cuda_rng,omitempty"`
	// OptimizerNames are the names optimizer parameters were tied by, by optimizer path:
	// the names themselves, not the file they were read from.
	OptimizerNames map[string][]string `json:"optimizer_names,omitempty"`
	ZeROOptimizer  bool                `json:"zero_optimizer,omitempty"`
}

// Rename is one rename rule: a regular expression (Go syntax) and its replacement
// ($1-style references).
type Rename struct {
	Pattern     string `json:"pattern"`
	Replacement string `json:"replacement"`
}
