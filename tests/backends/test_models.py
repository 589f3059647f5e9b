"""Model shapes: presets match the published configs, per-GPU sizes, refusals."""

import json
from dataclasses import replace

import pytest

from backends.hardware import GPUS
from backends.models import PRESETS, ModelShape, load_model
from backends.sglang_memory import prefill_graph_sizes, sglang_mem_fraction_static
from traces.errors import SpecschedError


def test_presets_exist_and_cite_their_source():
    for name in ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen2.5-32b"):
        assert name in PRESETS
        m = load_model(name)
        assert "config.json" in m.source


def test_published_parameter_counts():
    # Llama-3.1-8B: 8.03B; 70B: 70.55B; DeepSeek-V3: 671B total, 37B active; Qwen2.5-32B: 32.8B
    assert load_model("llama-3.1-8b").params_total == 8_030_261_248
    assert load_model("llama-3.1-70b").params_total == 70_553_706_496
    ds = load_model("deepseek-v3")
    assert round(ds.params_total / 1e9) == 671
    assert round(ds.active_params_per_token / 1e9) in (37, 38)
    assert round(load_model("qwen2.5-32b").params_total / 1e9, 1) == 32.8


def test_tensor_parallel_shards():
    m70 = load_model("llama-3.1-70b")
    assert m70.tp == 8 and m70.heads_per_gpu == 8 and m70.kv_heads_per_gpu == 1
    assert m70.params_per_gpu * 8 == pytest.approx(m70.params_total, rel=1e-3)
    # tp larger than the KV heads: KV heads are replicated, not split below 1
    m16 = load_model("llama-3.1-70b", tp=16)
    assert m16.kv_heads_per_gpu == 1


def test_kv_bytes_per_token():
    m8 = load_model("llama-3.1-8b")
    assert m8.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert load_model("llama-3.1-70b").kv_bytes_per_token == 2 * 80 * 1 * 128 * 2  # tp 8
    ds = load_model("deepseek-v3")
    # MLA: latent + rope per layer, replicated on every rank (not divided by tp)
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert load_model("deepseek-v3", tp=1).kv_bytes_per_token == ds.kv_bytes_per_token


def test_deepseek_is_mla_moe_fp8():
    ds = load_model("deepseek-v3")
    assert ds.is_mla and ds.is_moe and ds.dtype_bytes == 1
    assert (ds.experts, ds.experts_per_token, ds.shared_experts, ds.dense_layers) == (256, 8, 1, 3)
    assert ds.moe_layers == 58


def test_eagle_draft_shape():
    m = load_model("llama-3.1-8b")
    d = m.draft
    assert d.layers == 1 and d.hidden == m.hidden and d.vocab == m.vocab and d.tp == m.tp
    # EAGLE (SGLang's llama_eagle.py, the default): fc over (embedding, hidden) in every pass
    assert m.draft_kind == "eagle" and d.fusion_in == 2 * m.hidden and d.attn_in == 0
    assert d.fusion_on_decode
    # EAGLE-3 (llama_eagle3.py): QKV over 2*hidden; the 3*hidden fusion only in draft-extend
    m3 = load_model("llama-3.1-8b", draft_kind="eagle3")
    d3 = m3.draft
    assert d3.fusion_in == 3 * m.hidden and d3.attn_in == 2 * m.hidden and not d3.fusion_on_decode
    assert load_model(m3).draft_kind == "eagle3" and load_model(m3, tp=2).draft_kind == "eagle3"
    with pytest.raises(SpecschedError, match="draft kind"):
        load_model("llama-3.1-8b", draft_kind="medusa")
    with pytest.raises(SpecschedError, match="draft_kind"):
        replace(m, draft_kind="medusa")
    assert d.kv_bytes_per_token == m.kv_bytes_per_token // m.layers
    assert m.eagle_draft(vocab=32000).vocab == 32000
    dd = load_model("deepseek-v3").draft  # MTP layer: MLA + MoE
    assert dd.layers == 1 and dd.is_mla and dd.is_moe and dd.moe_layers == 1
    assert dd.fusion_in == 2 * dd.hidden and dd.fusion_on_decode   # eh_proj in every pass
    assert load_model("deepseek-v3", draft_kind="eagle3").draft.fusion_on_decode  # still MTP


def test_sglang_mem_fraction_default():
    """sglang 0.5.23's memory hook and AITER factor, worked by hand on an H200 (143,771 MiB)."""
    h200 = GPUS["H200"].memory_bytes
    mem = h200 / 2**20
    assert mem == 143771
    # prefill graphs at 4-32 step 4 (8), 48-256 step 16 (14), 288-512 step 32 (8), 576-1,024
    # step 64 (8), 1,280-4,096 step 256 (12), then 4,608-8,192 step 512 (8): 58 of them
    assert len(prefill_graph_sizes(8192)) == 8 + 14 + 8 + 8 + 12 + 8 == 58
    assert prefill_graph_sizes(2048)[-5:] == [1024, 1280, 1536, 1792, 2048]
    # tp 1, dense: 512 + 8192 x 1.5 + 1/8 x 1024 + 256 graphs x 2 + 58 x 8 MiB = 13,904
    frac = round((mem - 13904) / mem, 3)
    assert frac == 0.903
    assert sglang_mem_fraction_static(h200, tp=1) == frac  # context unknown: no AITER factor
    assert sglang_mem_fraction_static(h200, tp=1, context_len=8192) == frac
    assert sglang_mem_fraction_static(h200, tp=1, context_len=131072) == pytest.approx(frac * 0.85)
    assert sglang_mem_fraction_static(h200, tp=1, attention_backend="triton",
                                      context_len=131072) == frac
    # an explicit --max-running-requests 48 lowers the decode graphs' max_bs to 48
    assert sglang_mem_fraction_static(h200, tp=1, max_running_requests=48) == round(
        (mem - (13904 - 512 + 96)) / mem, 3) == 0.906
    # MLA at tp 8: 512 + 12,288 + 1,024 + 512 graphs x 2 + 1.5 GiB of prefill graphs = 16,384
    assert sglang_mem_fraction_static(h200, tp=8, mla=True) == round((mem - 16384) / mem, 3) == 0.886
    # an AMD GPU captures no prefill graphs; 192 GB: 16k chunk, 512 graphs
    mi = GPUS["MI300X"].memory_bytes
    assert sglang_mem_fraction_static(mi, nvidia=False) == round(
        (mi / 2**20 - (512 + 16384 * 1.5 + 128 + 1024)) / (mi / 2**20), 3)
    # 16 GiB: 2k chunk, 8 graphs, 42 prefill graphs, no 10 GiB floor
    assert sglang_mem_fraction_static(16 * 2**30) == round(
        (16384 - (512 + 2048 * 1.5 + 128 + 16 + 42 * 8)) / 16384, 3) == 0.752


def test_kv_capacity_formula():
    m = load_model("llama-3.1-8b")
    g = GPUS["H200"]
    free = g.memory_bytes * 0.9 - m.weight_bytes_per_gpu
    # without speculation a token is the target's KV; with EAGLE the draft's one layer too
    assert m.kv_capacity_tokens("H200", 0.9, context_reserve_bytes=0, speculative=False) == int(
        free // 131072)
    assert m.kv_capacity_tokens("H200", 0.9, context_reserve_bytes=0) == int(
        free // (131072 + 131072 // 32))
    # SGLang's default on an H200 with AITER and Llama-3.1's 131,072-token context
    frac = round((143771 - 13904) / 143771, 3) * 0.85
    assert m.kv_capacity_tokens("H200") == int(
        (g.memory_bytes * frac - m.weight_bytes_per_gpu - 2**30) // (131072 + 4096))
    assert load_model("llama-3.1-70b").kv_capacity_tokens("H200") > 1_000_000
    with pytest.raises(SpecschedError, match="does not fit"):
        load_model("llama-3.1-70b", tp=1).kv_capacity_tokens("H100")


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


GQA = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
       "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
       "vocab_size": 32768, "torch_dtype": "bfloat16", "_name_or_path": "mistralai/Mistral-7B"}


def test_config_json_gqa(tmp_path):
    m = load_model(_write(tmp_path, GQA), tp=2)
    assert (m.name, m.layers, m.kv_heads, m.head_dim, m.tp) == ("Mistral-7B", 32, 8, 128, 2)
    assert load_model(tmp_path).layers == 32  # a folder holding config.json


def test_config_json_mixtral_moe(tmp_path):
    cfg = dict(GQA, num_local_experts=8, num_experts_per_tok=2)
    m = load_model(_write(tmp_path, cfg))
    assert m.experts == 8 and m.moe_intermediate == 14336 and m.dense_layers == 0


def test_config_json_mla_without_q_lora(tmp_path):
    cfg = {"hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "num_hidden_layers": 27, "num_attention_heads": 16, "n_routed_experts": 64,
           "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
           "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400}
    m = load_model(_write(tmp_path, cfg))
    assert m.is_mla and m.q_lora_rank == 0 and m.kv_bytes_per_token == 27 * 576 * 2


def test_text_config_is_used(tmp_path):
    m = load_model(_write(tmp_path, {"text_config": GQA, "vision_config": {}}))
    assert m.hidden == 4096


@pytest.mark.parametrize("edit,key", [
    ({"hidden_size": None}, "hidden_size"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ({"ssm_state_size": 16}, "ssm_state_size"),
    ({"layer_types": ["full_attention", "linear_attention"]}, "layer_types"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
])
def test_refusals_name_file_and_key(tmp_path, edit, key):
    cfg = dict(GQA, **edit)
    if edit.get("hidden_size", 1) is None:
        del cfg["hidden_size"]
    p = _write(tmp_path, cfg)
    with pytest.raises(SpecschedError) as e:
        load_model(p)
    assert str(p) in str(e.value) and f"'{key}'" in str(e.value)


def test_bad_tp_and_unknown_names(tmp_path):
    with pytest.raises(SpecschedError, match="do not split over tp 3"):
        load_model("llama-3.1-8b", tp=3)
    with pytest.raises(SpecschedError, match="llama-3.1-8b"):
        load_model("gpt-5")
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(SpecschedError, match="not valid JSON"):
        load_model(p)


def test_dict_roundtrip_and_hashable():
    m = load_model("deepseek-v3")
    assert ModelShape.from_dict(m.as_dict()) == m
    assert hash(m) == hash(replace(m))
    with pytest.raises(SpecschedError, match="unknown keys"):
        ModelShape.from_dict({**m.as_dict(), "bogus": 1})
