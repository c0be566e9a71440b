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
    from pytest_specbound.physics.gguf_writer import write_llama_gguf

    path = write_llama_gguf(tmp_path / "m.gguf", n_layers=2, hidden=64, ffn=128, heads=4)
    m = load_model(str(path))
    assert m.exact_bytes and m.n_layers == 2 and m.hidden == 64
    data_bytes = sum(int(t.n_bytes) for t in __import__("gguf").GGUFReader(str(path)).tensors)
    assert m.weight_bytes == data_bytes
    assert "GGUF llama" in m.source


def test_gguf_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_model(str(tmp_path / "nope.gguf"))
