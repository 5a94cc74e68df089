package forward

// gptFamilies are the decoders of the GPT lineage: learned or ALiBi positions, LayerNorms
// with biases, fused projections.
var gptFamilies = map[string]family{}
