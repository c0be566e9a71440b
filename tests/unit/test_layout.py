"""Deployments beyond one GPU group: the round at a layout (TP across nodes, EP with the busiest
rank, DP attention, pipeline stages), the layout checked against the GPUs, read from budgets and
launch commands, and named where the server runs another."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.pipeline.crosscheck import mismatches
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.layout import Layout, all_to_all_us, busiest_share
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import Deployment, compute_roofline
from pytest_specbound.physics.speculative import parse_speculation

DEEPSEEK = load_model("deepseek-r1")
MTP3 = parse_speculation("mtp:3")


def roof(hw: str, layout: Layout | None = None, batch: int = 1, model=DEEPSEEK, spec=MTP3,
         nodes: int | None = None):
    h = parse_hardware(hw)
    if nodes:
        h = h.on_nodes(nodes)
    return compute_roofline(h, model, spec, None, Deployment(batch=batch, layout=layout))


def test_the_busiest_rank_matches_a_simulated_router():
    """Tokens routed uniformly at random (top-8 of 256 each): the most experts hit on one of 8
    ranks, averaged over many steps, is what busiest_share expects (within 7%)."""
    rng = random.Random(0)
    for tokens in (4, 32, 128):
        maxima = []
        for _ in range(400):
            hit = set()
            for _ in range(tokens):
                hit.update(rng.sample(range(256), 8))
            maxima.append(max(sum(1 for e in hit if e // 32 == r) for r in range(8)))
        p_hit = 1 - (248 / 256) ** tokens
        assert busiest_share(32, p_hit, 8) == pytest.approx(statistics.fmean(maxima), rel=0.07)


@given(st.integers(1, 64), st.floats(0.0, 1.0), st.integers(1, 256))
@settings(max_examples=200)
def test_the_busiest_share_lies_between_the_mean_and_all(local, p, ranks):
    share = busiest_share(local, p, ranks)
    assert local * p - 1e-9 <= share <= local + 1e-9
    if ranks == 1:
        assert share == pytest.approx(local * p)


def test_expert_parallelism_reads_the_busiest_ranks_experts_and_pays_two_all_to_alls():
    tp8 = roof("h200x8", Layout(tp=8))
    ep8 = roof("h200x8", Layout(tp=8, ep=8))
    # the mean EP rank reads what a TP rank reads; the busiest reads more, and sets the round
    assert ep8.components_ms["weights"] > tp8.components_ms["weights"]
    assert "all_to_all" in ep8.components_ms and "all_to_all" not in tp8.components_ms
    assert ep8.components_ms["allreduce"] < tp8.components_ms["allreduce"]  # MoE: no allreduce
    (experts,) = [n for n in ep8.notes if n.startswith("experts:")]
    assert "4 tokens hit 30.5 of 256 per MoE layer; the busiest of 8 EP ranks holds 6.6" in experts
    # more tokens per step (batch x verify width) touch more experts on every rank
    assert roof("h200x8", Layout(tp=8, ep=8), batch=8).components_ms["weights"] > \
        2 * ep8.components_ms["weights"]


def test_all_to_all_follows_the_link_and_the_tokens():
    nv = all_to_all_us(1, 8, 7168, 8, intra_node=True)
    rdma = all_to_all_us(1024, 8, 7168, 16, intra_node=False)
    assert nv[0] == nv[1] == 10.0 and "assumed" in nv[2]  # a few tokens: the stated floor
    # 128 tokens per GPU at EP 16 over RDMA: DeepEP's own figures (118 us dispatch, 195 combine)
    d, c, source = all_to_all_us(128, 8, 7168, 16, intra_node=False)
    assert d == pytest.approx(118, rel=0.05) and c == pytest.approx(195, rel=0.05)
    assert "DeepEP" in source
    assert rdma[0] == pytest.approx(8 * d, rel=0.01)  # bandwidth-bound: linear in the tokens


def test_overlap_hides_the_all_to_all_under_the_reads():
    plain = roof("h100x72", Layout(tp=72, ep=72, dp_attention=True), batch=4096)
    hidden = roof("h100x72", Layout(tp=72, ep=72, dp_attention=True, overlap=True), batch=4096)
    assert hidden.components_ms["all_to_all"] < plain.components_ms["all_to_all"]
    assert any("overlapped" in n for n in hidden.notes)


def test_tensor_parallelism_across_nodes_crosses_the_scale_out_network():
    llama = load_model("llama-3.3-70b")
    one_node = roof("h100x8", model=llama, spec=parse_speculation("none"))
    two_nodes = roof("h100x16", model=llama, spec=parse_speculation("none"))
    assert two_nodes.layout == Layout(tp=16) and one_node.layout is None
    per_layer = 2 * llama.n_layers
    # each allreduce pays the NVLink group's latency and two hops each way across the nodes
    assert two_nodes.components_ms["allreduce"] > one_node.components_ms["allreduce"] + \
        per_layer * 0.009
    assert any("TP16 spans 2 nodes" in n and "ConnectX-7" in n for n in two_nodes.notes)
    four = roof("h100x16", model=llama, spec=parse_speculation("none"), nodes=4)
    assert four.components_ms["allreduce"] > two_nodes.components_ms["allreduce"]


def test_pipeline_stages_add_gpus_not_speed_at_batch_one():
    llama = load_model("llama-3.3-70b")
    none = parse_speculation("none")
    tp4 = roof("h100x4", Layout(tp=4), model=llama, spec=none)
    tp4pp2 = roof("h100x8", Layout(tp=4, pp=2), model=llama, spec=none)
    # each GPU reads half as much, but a round crosses both stages one after the other
    assert tp4pp2.components_ms["weights"] == pytest.approx(tp4.components_ms["weights"])
    assert tp4pp2.components_ms["pipeline"] > 0 and tp4pp2.round_ms > tp4.round_ms


def test_dp_attention_splits_the_latent_kv_cache():
    long = Deployment(batch=64, context=8000)
    hw = parse_hardware("h200x8")
    tp = compute_roofline(hw, DEEPSEEK, MTP3, None,
                          Deployment(long.context, long.batch, layout=Layout(tp=8, ep=8)))
    dpa = compute_roofline(hw, DEEPSEEK, MTP3, None,
                           Deployment(long.context, long.batch,
                                      layout=Layout(tp=8, ep=8, dp_attention=True)))
    assert dpa.components_ms["kv_cache"] == pytest.approx(tp.components_ms["kv_cache"] / 8)
    assert any("MLA latent cache is kept whole" in n for n in tp.notes)
    # at another context the KV read follows, at the layout's share
    assert dpa.at_context(16000).components_ms["kv_cache"] == \
        pytest.approx(2 * dpa.components_ms["kv_cache"], rel=0.01)


@pytest.mark.parametrize(("layout", "hw", "needle"), [
    (Layout(tp=3), "h200x8", r"tp x pp = 3 x 1 = 3 GPUs does not divide the 8 GPUs given"),
    (Layout(tp=8, ep=3), "h200x8", r"ep=3 must divide tp=8"),
    (Layout(tp=1, dp_attention=True), "h200", r"dp_attention needs tp > 1"),
    (Layout(tp=12), "h100x24", r"tp=12 spans nodes of 8 GPUs unevenly"),
])
def test_a_layout_that_does_not_fit_is_one_line(layout, hw, needle):
    with pytest.raises(ConfigError, match=needle):
        roof(hw, layout)


def test_a_dense_model_has_no_experts_to_spread():
    with pytest.raises(ConfigError, match=r"ep=2: the model has no routed experts"):
        roof("h100x2", Layout(tp=2, ep=2), model=load_model("llama-3.1-8b"),
             spec=parse_speculation("none"))


@pytest.mark.parametrize(("nodes", "needle"), [
    (3, r"--nodes=3: the 16 GPUs of h100-sxmx16 do not split evenly over 3 nodes"),
    (1, r"--nodes=1: 16 GPUs a node, but a h100-sxm node holds 8"),
])
def test_nodes_that_do_not_fit_are_one_line(nodes, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_hardware("h100x16").on_nodes(nodes)


BUDGET = """[model]
name = "deepseek-r1"
[speculative]
method = "mtp"
steps = 3
[server]
backend = "{backend}"
launch = "{launch}"
[parallel]
{parallel}
[classes.chat]
"""


def budget(tmp_path, parallel: str, launch: str, backend: str = "sglang"):
    path = tmp_path / "b.toml"
    path.write_text(BUDGET.format(parallel=parallel, launch=launch, backend=backend))
    return load_budget(path), path


def test_a_budgets_parallel_table_sets_the_layout(tmp_path):
    b, _ = budget(tmp_path, "ep = 8\ndp_attention = true\nnodes = 1",
                  "python -m sglang.launch_server --tp 8 --port {port}")
    assert b.layout == Layout(tp=0, ep=8, dp_attention=True) and b.nodes == 1
    assert b.layout.on(8) == Layout(tp=8, ep=8, dp_attention=True)
    with pytest.raises(ConfigError, match=r"b\.toml:\d+: parallel\.dp_attention: must be true or "
                                          r"false, got 'yes'"):
        budget(tmp_path, 'dp_attention = "yes"', "x")
    with pytest.raises(ConfigError, match=r"parallel\.ranks: unknown key"):
        budget(tmp_path, "ranks = 2", "x")


@pytest.mark.parametrize(("backend", "launch", "found"), [
    ("sglang", "python -m sglang.launch_server --tp 8 --port {port}",
     ["the server runs EP 1 (launch: no --ep-size)",
      "the server runs no DP attention (launch: no --enable-dp-attention)"]),
    ("sglang", "python -m sglang.launch_server --tp 8 --ep 8 --enable-dp-attention --dp 8", []),
    ("vllm", "vllm serve deepseek-ai/DeepSeek-R1 -tp 8",
     ["the server runs EP 1 (launch: no --enable-expert-parallel)",
      "the server runs no DP attention (launch: no --enable-expert-parallel)"]),
    ("vllm", "vllm serve deepseek-ai/DeepSeek-R1 -dp 8 --enable-expert-parallel", []),
    ("trtllm", "trtllm-serve deepseek-ai/DeepSeek-R1 --tp_size 8 --ep_size 4",
     ["the server runs EP 4 (launch: --ep_size 4)"]),
])
def test_the_served_layout_is_held_against_the_budgets(tmp_path, backend, launch, found):
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.settings import argv_of

    b, path = budget(tmp_path, "ep = 8\ndp_attention = true", launch, backend)
    served = get_backend(backend).served_from_launch(argv_of(launch))
    got = [m for m in mismatches(b, parse_hardware("h200x8"), served)
           if "TP8 EP8 DP attention" in m]
    assert [m.split("; ", 1)[1] for m in got] == found, got
    assert all(m.startswith(f"budget says TP8 EP8 DP attention ({path}:") for m in got)


def test_pipeline_stages_count_towards_the_gpus():
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.settings import argv_of

    served = get_backend("vllm").served_from_launch(argv_of("vllm serve m -tp 4 -pp 2"))
    assert served.instance_gpus == 8 and served.pp_size == 2


def vllm_config(tp: int, dp: int = 1, expert: bool = False) -> dict:
    """The parts of vLLM's ``/server_info?config_format=json`` dump the layout is read from."""
    return {"model_config": {"model": "deepseek-ai/DeepSeek-R1", "enforce_eager": False},
            "parallel_config": {"tensor_parallel_size": tp, "pipeline_parallel_size": 1,
                                "data_parallel_size": dp, "enable_expert_parallel": expert,
                                "world_size": tp},
            "speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}


@pytest.mark.parametrize(("config", "text", "found"), [
    (vllm_config(8), False,
     ["the server runs EP 1 (/server_info parallel_config enable_expert_parallel false)",
      "the server runs no DP attention (/server_info parallel_config enable_expert_parallel "
      "false, data_parallel_size 1)"]),
    (vllm_config(1, dp=8, expert=True), False, []),
    # an older vLLM's one-line config names the sizes, not expert parallelism
    (vllm_config(4), True,
     ["the server runs TP 4 (/server_info vllm_config tensor_parallel_size=4)"]),
])
def test_an_attached_vllm_says_its_layout_in_dev_mode(tmp_path, config, text, found):
    """Attached by URL, a vLLM with VLLM_SERVER_DEV_MODE=1 dumps its engine config at
    /server_info: its TP, PP, DP and expert parallelism are read from there, no launch needed."""
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.transport import Endpoint
    from tests.servers.fake import FakeServer, Script

    b, path = budget(tmp_path, "ep = 8\ndp_attention = true", "x", "vllm")
    vllm = get_backend("vllm")
    with FakeServer("vllm", Script(vllm_config=config, text_config=text)) as fake:
        endpoint = Endpoint(fake.url)
        served = vllm.served(endpoint, vllm.info(endpoint), None)
    assert served.method == ("mtp" if not text else None)
    got = [m.split("; ", 1)[1] for m in mismatches(b, parse_hardware("h200x8"), served)
           if m.startswith(f"budget says TP8 EP8 DP attention ({path}:")]
    assert got == found


def test_a_vllm_without_dev_mode_leaves_the_layout_to_its_launch(tmp_path):
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.transport import Endpoint
    from tests.servers.fake import FakeServer, Script

    vllm = get_backend("vllm")
    with FakeServer("vllm", Script()) as fake:
        endpoint = Endpoint(fake.url)
        attached = vllm.served(endpoint, vllm.info(endpoint), None)
        launched = vllm.served(endpoint, vllm.info(endpoint), "vllm serve m --port 8000")
    assert attached.tp_size is None and attached.instance_gpus is None
    # vLLM's defaults, where the launch leaves the flags out: a forgotten -tp is a TP 1 server
    assert (launched.tp_size, launched.pp_size, launched.ep_size) == (1, 1, 1)
    assert launched.sources["tp_size"] == "launch: no --tensor-parallel-size"
    found = mismatches_for(tmp_path, "vllm", "vllm serve m --port 8000", "h200x2")
    assert found == ["hardware h200x2 has 2 GPUs; the server runs TP 1 "
                     "(launch: no --tensor-parallel-size)"]


@pytest.mark.parametrize(("backend", "launch", "source"), [
    ("sglang", "python -m sglang.launch_server --model-path m", "launch: no --tp-size"),
    ("trtllm", "trtllm-serve m --port 8000", "launch: no --tp_size"),
])
def test_other_servers_defaults_are_a_single_gpu(tmp_path, backend, launch, source):
    assert mismatches_for(tmp_path, backend, launch, "h200x2") == [
        f"hardware h200x2 has 2 GPUs; the server runs TP 1 ({source})"]


def mismatches_for(tmp_path, backend: str, launch: str, hw: str) -> list[str]:
    """What the settings check says of a server launched so, for a budget with no layout."""
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.settings import argv_of

    path = tmp_path / "plain.toml"
    path.write_text(f'[model]\nname = "llama-3.1-8b"\n[server]\nbackend = "{backend}"\n'
                    f"launch = '{launch}'\n[classes.chat]\n")
    served = get_backend(backend).served_from_launch(argv_of(launch))
    return mismatches(load_budget(path), parse_hardware(hw), served)


@pytest.mark.parametrize(("launch", "tp", "pp", "source"), [
    ("llama-server -m m.gguf -sm none", 1, 1, "launch: -sm none"),
    ("llama-server -m m.gguf -ts 3,1", 1, 2, "launch: no --split-mode (layer), -ts 3,1"),
    ("llama-server -m m.gguf --split-mode row --tensor-split 1,1,1,1", 4, 1,
     "launch: --split-mode row, --tensor-split 1,1,1,1"),
    ("llama-server -m m.gguf -sm tensor -dev CUDA0,CUDA1", 2, 1,
     "launch: -sm tensor, -dev CUDA0,CUDA1"),
    ("llama-server -m m.gguf", None, None, ""),  # the host's GPUs: not in the command
])
def test_llama_server_says_its_split_where_its_launch_does(launch, tp, pp, source):
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.settings import argv_of

    served = get_backend("llamacpp").served_from_launch(argv_of(launch))
    assert (served.tp_size, served.pp_size) == (tp, pp)
    assert served.sources.get("tp_size", "") == source


def test_a_budget_for_tensor_parallelism_on_llama_servers_layer_split_is_named(tmp_path):
    """llama.cpp's default split hands layers from GPU to GPU: at batch 1 one GPU works at a
    time, which a budget written for TP 2 on the same two GPUs does not describe."""
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.settings import argv_of

    launch = "llama-server -m m.gguf -ts 1,1 --port 8080"
    path = tmp_path / "b.toml"
    path.write_text(f'[model]\nname = "llama-3.1-8b"\n[server]\nbackend = "llamacpp"\n'
                    f"launch = '{launch}'\n[parallel]\ntp = 2\n[classes.chat]\n")
    served = get_backend("llamacpp").served_from_launch(argv_of(launch))
    found = mismatches(load_budget(path), parse_hardware("a6000x2"), served)
    where = "launch: no --split-mode (layer), -ts 1,1"
    assert [m.split("; ", 1)[1] for m in found] == [f"the server runs TP 1 ({where})",
                                                    f"the server runs PP 2 ({where})"], found
