"""Small random configs of the transformers MoE families moejit's experts backend serves, for
the tests and bench/train_compare.py (no downloads: every model is built from a config).

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


# ------------------------------------------------------------------ test helpers


def experts_modules(model):
    return [m for m in model.modules() if hasattr(m, "gate_up_proj")]


def rescale_experts(model, seed):
    """transformers' init (std 0.02) makes the experts a tiny part of each layer's output;
    give them fan-in scaled weights (and biases) so a wrong expert computation shows."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in experts_modules(model):
            for name, p in m.named_parameters(recurse=False):
                fan_in = p.shape[-1] if not getattr(m, "is_transposed", False) else p.shape[-2]
                if p.dim() == 2:  # a bias
                    fan_in = 4 * p.shape[-1]
                p.copy_((torch.randn(p.shape, generator=g) * fan_in ** -0.5).to(p.device))
        # Routers with well separated scores, so that bf16 rounding differences between the
        # two models do not flip a token's top-k choice (which no tolerance could absorb).
        for m in model.modules():
            if "Router" in type(m).__name__:
                m.weight.copy_((torch.randn(m.weight.shape, generator=g) * 4).to(m.weight.device))


def model_pair(family, dtype=None, seed=0, device="cpu", **sizes):
    """(eager model, moejit model) with identical weights."""
    import torch
    dtype = dtype or torch.bfloat16
    eager = build(family, "eager", dtype=dtype, seed=seed, **sizes)
    rescale_experts(eager, seed + 1)
    eager.to(device)
    fused = build(family, "moejit", dtype=dtype, seed=seed + 7, device=device, **sizes)
    fused.load_state_dict(eager.state_dict())
    assert fused.config._experts_implementation == "moejit"
    return eager, fused


def run(model, ids, owner=None):
    """(logits, loss, {name: grad}) of one step; owner: the module holding the parameters
    (the original of a compiled model)."""
    owner = model if owner is None else owner
    owner.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad for n, p in owner.named_parameters()}
    return out.logits.detach(), out.loss.detach(), grads


def rel(a, b):
    a, b = a.double(), b.double()
    den = b.norm().item()
    diff = (a - b).norm().item()
    return diff / den if den > 0 else diff
