package forward

import (
	"testing"
)

// FuzzParseConfig: any config.json either parses into a configuration whose rotary
// frequencies can be computed, or is refused with an error; never a panic or an allocation
// sized by the input.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"model_type":"llama","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,"max_position_embeddings":64}`,
		`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"max_position_embeddings":64,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16},"rope_theta":500000}`,
		`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"max_position_embeddings":8,"rope_parameters":{"rope_type":"dynamic","factor":2,"rope_theta":10000}}`,
		`{"model_type":"llama","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":32,"rope_parameters":{"rope_type":"longrope","rope_theta":10000,"original_max_position_embeddings":8,"short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2]}}`,
		`{"model_type":"mistral","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,"sliding_window":4}`,
		`{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"vocab_size":97,"use_sliding_window":true,"sliding_window":3,"max_window_layers":1}`,
		`{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"head_dim":16,"vocab_size":97,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,"mlp_only_layers":[1]}`,
		`{"model_type":"gpt_oss","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":97,"num_local_experts":4,"num_experts_per_tok":2,"intermediate_size":32,"max_position_embeddings":64}`,
		`{"model_type":"gemma3_text","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"head_dim":16,"vocab_size":97,"rope_parameters":{"full_attention":{"rope_type":"linear","factor":8,"rope_theta":1000000},"sliding_attention":{"rope_type":"default","rope_theta":10000}}}`,
		`{"model_type":"gemma2","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"head_dim":16,"vocab_size":97,"attn_logit_softcapping":null}`,
		`{"model_type":"mixtral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,"num_local_experts":4,"num_experts_per_tok":2,"intermediate_size":32,"sliding_window":5}`,
		`{"model_type":"phi3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"max_position_embeddings":32,"original_max_position_embeddings":8,"rope_parameters":{"rope_type":"longrope","rope_theta":10000,"partial_rotary_factor":0.5,"short_factor":[1,1,1,1],"long_factor":[2,2,2,2]}}`,
		`{"model_type":"olmo2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"attention_bias":true}`,
		`{"model_type":"granite","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"embedding_multiplier":12,"attention_multiplier":0.015625,"residual_multiplier":0.22,"logits_scaling":8}`,
		`{"model_type":"gemma","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"head_dim":16,"vocab_size":97,"hidden_act":"gelu"}`,
		`{"model_type":"starcoder2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"use_bias":false,"sliding_window":5}`,
		`{"model_type":"qwen2_moe","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"vocab_size":97,"num_experts":6,"num_experts_per_tok":2,"moe_intermediate_size":16,"shared_expert_intermediate_size":48,"mlp_only_layers":[1]}`,
		`{"model_type":"stablelm","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"use_qkv_bias":true,"qk_layernorm":true,"use_parallel_residual":true,"partial_rotary_factor":0.5}`,
		`{"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"vocab_size":97,"q_lora_rank":24,"kv_lora_rank":16,"qk_rope_head_dim":8,"qk_nope_head_dim":8,"v_head_dim":12,"n_routed_experts":8,"num_experts_per_tok":2,"n_group":4,"topk_group":2,"moe_intermediate_size":16,"first_k_dense_replace":1}`,
		`{"model_type":"bert"}`,
		`{"model_type":"llama","hidden_size":1e300,"num_hidden_layers":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Blocks) != c.Layers {
			t.Fatalf("%d blocks for %d layers", len(c.Blocks), c.Layers)
		}
		for _, b := range c.Blocks {
			if r := b.Attn.Rope; r != nil {
				for _, T := range []int{1, 7} {
					if _, err := r.Rope.InvFreq(T); err != nil {
						t.Fatalf("parsed config's rope fails: %v", err)
					}
				}
			}
		}
	})
}
