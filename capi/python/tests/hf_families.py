"""Small random configs of the transformers MoE families moejit's experts backend serves, for
the tests and scripts/train_compare.py (no downloads: every model is built from a config).

make_config(family, hidden, inter, experts, top_k, layers, vocab) -> a transformers config
whose experts are [experts] x (hidden -> inter), top_k routed per token, every layer MoE.
"""

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3", "gpt_oss")


def make_config(family: str, hidden: int = 64, inter: int = 32, experts: int = 8,
                top_k: int = 2, layers: int = 2, vocab: int = 128, heads: int = 4,
                **overrides):
    import transformers as hf

    head_dim = hidden // heads
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                  max_position_embeddings=4096, num_experts_per_tok=top_k,
                  tie_word_embeddings=False, use_cache=False, pad_token_id=None,
                  bos_token_id=0, eos_token_id=1)
    if family == "qwen3_moe":
        cfg = hf.Qwen3MoeConfig(**common, head_dim=head_dim, intermediate_size=2 * inter,
                                moe_intermediate_size=inter, num_experts=experts,
                                decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    elif family == "qwen2_moe":
        cfg = hf.Qwen2MoeConfig(**common, intermediate_size=2 * inter,
                                moe_intermediate_size=inter, shared_expert_intermediate_size=inter,
                                num_experts=experts, decoder_sparse_step=1, mlp_only_layers=[])
    elif family == "mixtral":
        cfg = hf.MixtralConfig(**common, head_dim=head_dim, intermediate_size=inter,
                               num_local_experts=experts)
    elif family == "olmoe":
        cfg = hf.OlmoeConfig(**common, intermediate_size=inter, num_experts=experts)
    elif family == "deepseek_v3":
        common["num_key_value_heads"] = heads
        cfg = hf.DeepseekV3Config(**common, intermediate_size=2 * inter,
                                  moe_intermediate_size=inter, n_routed_experts=experts,
                                  n_shared_experts=1, first_k_dense_replace=0, n_group=1,
                                  topk_group=1, kv_lora_rank=hidden // 2, q_lora_rank=None,
                                  qk_rope_head_dim=head_dim // 2, qk_nope_head_dim=head_dim // 2,
                                  v_head_dim=head_dim, routed_scaling_factor=1.0)
    elif family == "gpt_oss":
        cfg = hf.GptOssConfig(**common, head_dim=head_dim, intermediate_size=inter,
                              num_local_experts=experts, sliding_window=64,
                              layer_types=["sliding_attention", "full_attention"] * (layers // 2)
                              + ["sliding_attention"] * (layers % 2))
    else:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def build(family: str, experts_implementation: str, dtype=None, device="cpu", seed: int = 0,
          **sizes):
    """A causal LM of make_config(family, **sizes), initialised from `seed`."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = make_config(family, **sizes)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, experts_implementation=experts_implementation,
                                             attn_implementation="eager")
    return model.to(device=device, dtype=dtype or torch.float32)
