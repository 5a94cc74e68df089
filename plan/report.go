package plan

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/optimizerstate"
)

// Report says what a conversion does to the values of a checkpoint, for the user and the
// manifest (its "remap" record).
type Report struct {
	// Stripped lists wrapper prefixes removed, e.g. "module." (in model.*).
	Stripped []string `json:"stripped,omitempty"`
	// Renamed counts tensor names changed by the rename rules.
	Renamed int `json:"renamed"`
	// Dropped lists the flattened names removed by the drop rules.
	Dropped []string `json:"dropped,omitempty"`
	// Cast counts tensors whose dtype changed.
	Cast int `json:"cast"`
	// Converted lists values turned into plain data (Options.PlainData).
	Converted []string `json:"converted,omitempty"`
	// Locations maps each saved tag seen to the tag written.
	Locations map[string]string `json:"locations"`
	// Optimizers says how each optimizer state was made to follow its model.
	Optimizers []*optimizerstate.Report `json:"optimizers,omitempty"`
	// RNG lists the RNG states written as CPU tensors; DroppedRNG the CUDA ones dropped.
	RNG []string `json:"rng,omitempty"`
	// HostData lists the tensors made from numpy arrays (PlainData): host data, never on a
	// device in the source, so they stay tagged "cpu" (numpy's RNG state must, for
	// np.random.set_state to take it back).
	HostData   []string `json:"host_data,omitempty"`
	DroppedRNG []string `json:"dropped_rng,omitempty"`
	// Carried says, for an output split over a mesh, what became of each piece of training
	// state that is not a parameter's: kept, replicated or dropped, and why.
	Carried []optimizerstate.Carried `json:"training_state,omitempty"`
	// Repaired lists scheduler values restored after a DCP round trip (MultiStepLR
	// milestones).
	Repaired []string `json:"repaired,omitempty"`
	// Warnings are problems the remap worked around, one per kind.
	Warnings []Warning `json:"warnings,omitempty"`
}

// Warning is one kind of problem a conversion works around, said once however many
// values it concerns.
type Warning struct {
	// Kind names the problem for programs ("cuda_rng_dropped", "values_not_written", …).
	Kind string `json:"kind"`
	// Message says it in one line, with the count and the first few items.
	Message string `json:"message"`
	// Items lists every value or file concerned, by flattened name.
	Items []string `json:"items,omitempty"`
	// Dropped is set when data of the source is not in the output.
	Dropped bool `json:"dropped,omitempty"`
}

// Summarize lists up to four items and how many more there are.
func Summarize(items []string) string {
	if len(items) > 4 {
		return strings.Join(items[:4], ", ") + fmt.Sprintf(" and %d more", len(items)-4)
	}
	return strings.Join(items, ", ")
}
