// Package plan decides, once, what a conversion does to every value of a checkpoint: what
// each tensor is (its Role: a model weight, an optimizer moment of parameter P, a step
// counter, an RNG state, a member of a quantized group, …), what happens to it (its
// statedict.Policy: cast or not, to which dtype, on which device, kept on the host,
// dropped), where it goes on the target's mesh (its sharding), and what the user is told.
//
// Make is a pure function of the source checkpoint, the conversion's Options and the
// runtime.Target. It gathers the decisions of the packages that know what values are —
// quant emits the policies of quantized groups (quant.Prepare), optimizerstate says what
// the training state is (optimizerstate.Decide), remap.Plain what becomes plain data — then
// has remap apply them with the name rules, makes each optimizer state follow its converted
// model, and places every tensor on the mesh. Every consumer reads the plan and none
// decides again: convert writes Plan.Output with Plan.Sharding, verify replays the plan a
// manifest records to know what each output tensor must hold, `ckpt plan` sums its
// TensorSpecs per device.
//
// Options.Record is the plan's typed, versioned record in the manifest (its "conversion"
// block), written whatever front end asked for the conversion; FromRecord reads it back,
// validating and bounding every field, and never opens anything it names.
package plan
