import json

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.physics.models import catalog, load_model

REQUIRED = ["llama-2-7b", "llama-2-70b", "llama-3.1-8b", "llama-3.3-70b", "qwen3-8b",
            "qwen3-30b-a3b", "deepseek-r1", "qwen3.6-27b"]


def test_catalog_entries_have_sources():
    for name in REQUIRED:
        assert catalog()[name]["source"].strip()


@pytest.mark.parametrize(("name", "params_b"), [("llama-2-7b", 6.74), ("llama-2-70b", 68.98),
                                                ("llama-3.1-8b", 8.03), ("qwen3-8b", 8.19),
                                                ("qwen3-30b-a3b", 30.5), ("deepseek-r1", 671)])
def test_parameter_counts_match_published_sizes(name, params_b):
    m = load_model(name)
    from pytest_specbound.physics.dtypes import bytes_per_param

    assert m.weight_bytes / bytes_per_param(m.dtype) / 1e9 == pytest.approx(params_b, rel=0.02)


def test_seed_model_facts():
    m = load_model("qwen3.6-27b")
    assert m.weight_bytes == 54e9 and m.mtp_bytes == 2.8e9 and m.n_layers == 64
    assert m.state_bytes > 0 and m.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2


def test_moe_and_mla_geometry():
    ds = load_model("deepseek-r1")
    assert (ds.n_experts, ds.experts_per_token, ds.moe_layers) == (256, 8, 58)
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2  # MLA caches the latent
    assert ds.mtp_bytes > 0 and ds.dtype == "fp8"
    assert 35e9 < ds.active_params < 40e9


def test_dtype_whatif_and_aliases():
    m = load_model("llama-3.1-8b")
    assert load_model("llama-3.1-8b", "fp8").weight_bytes == pytest.approx(m.weight_bytes / 2)
    assert load_model("llama-3.1-8b", "float8").dtype == "fp8"
    assert load_model("llama-3.1-8b", "int4").weight_bytes < m.weight_bytes / 3.5
    with pytest.raises(ConfigError, match="unknown dtype; valid: fp32, bf16"):
        load_model("llama-3.1-8b", "fp7")


def test_unknown_model_lists_catalog():
    with pytest.raises(ConfigError) as err:
        load_model("llama-9")
    assert "llama-2-7b" in str(err.value) and "\n" not in str(err.value)


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


DENSE = {"hidden_size": 1024, "num_hidden_layers": 4, "intermediate_size": 4096,
         "vocab_size": 1000, "num_attention_heads": 16, "num_key_value_heads": 4,
         "torch_dtype": "bfloat16"}


def test_config_json_dense_gqa(tmp_path):
    m = load_model(str(_write(tmp_path, DENSE)))
    per_layer = 2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 4096
    assert m.weight_bytes == (4 * per_layer + 2 * 1000 * 1024) * 2
    assert m.kv_bytes_per_token == 4 * 2 * 4 * 64 * 2


def test_config_json_tied_embeddings(tmp_path):
    untied = load_model(str(_write(tmp_path, DENSE)))
    tied = load_model(str(_write(tmp_path, {**DENSE, "tie_word_embeddings": True}, "t.json")))
    assert untied.weight_bytes - tied.weight_bytes == 1000 * 1024 * 2


def test_config_json_hybrid_linear_attention_and_mtp(tmp_path):
    cfg = {**DENSE, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
           "linear_num_value_heads": 8, "linear_num_key_heads": 4, "linear_key_head_dim": 64,
           "linear_value_head_dim": 64, "mtp_num_hidden_layers": 1}
    m = load_model(str(_write(tmp_path, cfg)))
    assert m.kv_bytes_per_token == 1 * 2 * 4 * 64 * 2
    assert m.state_bytes >= 3 * 8 * 64 * 64 * 4
    assert m.mtp_bytes > 0


def test_config_json_nested_text_config_and_moe(tmp_path):
    cfg = {"text_config": {**DENSE, "num_experts": 8, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 512}}
    m = load_model(str(_write(tmp_path, cfg)))
    assert (m.n_experts, m.experts_per_token, m.moe_layers) == (8, 2, 4)


def test_config_json_missing_field(tmp_path):
    cfg = dict(DENSE)
    del cfg["hidden_size"]
    with pytest.raises(ConfigError, match=r"config.json: missing field 'hidden_size'"):
        load_model(str(_write(tmp_path, cfg)))
    with pytest.raises(ConfigError, match="missing field 'num_experts_per_tok'"):
        load_model(str(_write(tmp_path, {**DENSE, "num_experts": 8}, "moe.json")))


def test_config_json_bad_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{\n  'oops'\n}")
    with pytest.raises(ConfigError, match=r"config.json:2: invalid JSON"):
        load_model(str(p))


def test_safetensors_index_gives_exact_bytes(tmp_path):
    _write(tmp_path, DENSE)
    index = {"metadata": {"total_size": 123_456_789},
             "weight_map": {"model.layers.0.mlp.up_proj.weight": "model-00001.safetensors"}}
    _write(tmp_path, index, "model.safetensors.index.json")
    m = load_model(str(tmp_path))
    assert m.weight_bytes == 123_456_789 and m.exact_bytes
    assert load_model(str(tmp_path / "model.safetensors.index.json")).weight_bytes == 123_456_789


def test_gguf_exact_bytes(tmp_path):
    pytest.importorskip("gguf")
    from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf

    path = write_llama_gguf(tmp_path / "m.gguf", LlamaShape(n_layers=2, hidden=64, ffn=128, heads=4))
    m = load_model(str(path))
    assert m.exact_bytes and m.n_layers == 2 and m.hidden == 64
    data_bytes = sum(int(t.n_bytes) for t in __import__("gguf").GGUFReader(str(path)).tensors)
    assert m.weight_bytes == data_bytes
    assert "GGUF llama" in m.source


def _llama_config(n_layers, hidden, ffn, heads, vocab, **extra):
    return {"hidden_size": hidden, "num_hidden_layers": n_layers, "intermediate_size": ffn,
            "num_attention_heads": heads, "num_key_value_heads": heads, "vocab_size": vocab,
            "torch_dtype": "float16", **extra}


def test_gguf_and_config_json_build_the_same_model(tmp_path):
    """One builder: a GGUF and the config.json of the same geometry agree on every field the
    geometry decides; the GGUF adds exact bytes (equal here: f16 matrices, small f32 norms)."""
    pytest.importorskip("gguf")
    from pytest_specbound.physics.gguf_writer import VOCAB, LlamaShape, write_llama_gguf

    path = write_llama_gguf(tmp_path / "m.gguf", LlamaShape(n_layers=3, hidden=64, ffn=128, heads=4))
    _write(tmp_path, _llama_config(3, 64, 128, 4, len(VOCAB)), "config.json")
    g, c = load_model(str(path)), load_model(str(tmp_path / "config.json"))
    for name in ("n_layers", "hidden", "vocab", "kv_bytes_per_token", "state_bytes", "mtp_bytes",
                 "n_experts", "moe_layers", "dtype"):
        assert getattr(g, name) == getattr(c, name), name
    norms = (3 * 2 + 1) * 64 * 4  # f32 norm vectors: in the file, not in the count
    assert g.weight_bytes == pytest.approx(c.weight_bytes + norms)
    assert g.layer_bytes == pytest.approx(c.layer_bytes + 2 * 64 * 4)
    assert g.lm_head_bytes == c.lm_head_bytes
    assert g.active_params == pytest.approx(c.active_params, rel=0.01)


def test_gguf_mtp_blocks_and_linear_state_are_read(tmp_path):
    pytest.importorskip("gguf")
    import gguf

    from pytest_specbound.physics.gguf_writer import VOCAB, LlamaShape, write_llama_gguf

    ssm = {"full_attention_interval": 2, "ssm.group_count": 2, "ssm.time_step_rank": 4,
           "ssm.state_size": 16, "ssm.inner_size": 64, "ssm.conv_kernel": 4}
    path = write_llama_gguf(tmp_path / "m.gguf", LlamaShape(n_layers=2, hidden=64, ffn=128, heads=4,
                                                            nextn=1, extra_fields=ssm))
    m = load_model(str(path))
    mtp = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors
              if t.name.startswith("blk.2."))
    assert m.n_layers == 2 and m.mtp_bytes == mtp > 0  # the appended block, exactly
    total = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)
    assert m.weight_bytes == total - mtp
    hf = _llama_config(2, 64, 128, 4, len(VOCAB), full_attention_interval=2,
                       linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                       linear_value_head_dim=16, linear_conv_kernel_dim=4)
    _write(tmp_path, hf, "config.json")
    assert m.state_bytes == load_model(str(tmp_path / "config.json")).state_bytes > 0


def test_gguf_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_model(str(tmp_path / "nope.gguf"))
