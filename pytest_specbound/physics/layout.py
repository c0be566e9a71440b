"""How one model instance is split over GPUs and nodes, and what each GPU then does per round.

A :class:`Layout` is tensor parallelism (``tp``), pipeline stages (``pp``), expert parallelism
(``ep``: the routed experts spread over that many GPUs, each holding ``n_experts / ep`` of every
MoE layer), and DP attention (each GPU of the TP group runs attention for its own sequences
with the whole attention weights, as SGLang's ``--enable-dp-attention`` and vLLM's
data-parallel attention with expert parallelism do). ``tp x pp`` GPUs serve one instance; more
GPUs are replicas, which a per-user rate does not see.

Per round, each GPU reads its own bytes: its TP / PP share of the dense weights (all the
attention weights of its stage under DP attention), its EP share of the experts the step's
tokens hit, taken at the **busiest** GPU (the expected maximum over the EP ranks of the experts
hit there, not the mean), and its sequences' KV cache (an MLA latent cache is kept whole by
every TP rank unless attention is data-parallel). Communication: the TP group's allreduces
(inside a node over its link, across nodes over the scale-out network), two all-to-alls per MoE
layer under EP (dispatch and combine, :data:`ALL_TO_ALL`), and at ``pp > 1`` the hand-offs
between stages, which a single sequence's round crosses one after another (a round is the sum of
its stages: pipeline stages add GPUs, not speed, at batch 1). Whether communication overlaps
compute (two-batch overlap) is the stated ``overlap`` assumption.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from pytest_specbound.errors import ConfigError


@dataclass(frozen=True)
class AllToAllAnchor:
    """Measured per-GPU bandwidth of one all-to-all phase at an EP size, with its source."""

    dispatch_gbs: dict[int, float]  # EP size -> GB/s per GPU, dispatch (FP8 tokens)
    combine_gbs: dict[int, float]  # EP size -> GB/s per GPU, combine (BF16 tokens)
    source: str

    def gbs(self, ep: int, phase: str) -> float:
        """The bandwidth at ``ep``, interpolated in log2(ep), held at the table's ends."""
        points = sorted((self.dispatch_gbs if phase == "dispatch" else self.combine_gbs).items())
        if ep <= points[0][0]:
            return points[0][1]
        for (e0, g0), (e1, g1) in itertools.pairwise(points):
            if ep <= e1:
                x = (math.log2(ep) - math.log2(e0)) / (math.log2(e1) - math.log2(e0))
                return g0 + (g1 - g0) * x
        return points[-1][1]


# DeepEP's low-latency kernels (deepseek-ai/DeepEP README, H800 with ConnectX-7 400 Gb/s
# InfiniBand, 128 tokens per batch, hidden 7168, top-8, FP8 dispatch / BF16 combine): dispatch
# 77 / 118 / 155 / 173 / 192 us and combine 114 / 195 / 273 / 314 / 369 us at EP 8 / 16 / 32 / 64 /
# 128, i.e. the RDMA bandwidths below. Over NVLink inside one node its normal kernels reach about
# 153 GB/s.
RDMA_ALL_TO_ALL = AllToAllAnchor(
    {8: 98.0, 16: 63.0, 32: 48.0, 64: 43.0, 128: 39.0},
    {8: 127.0, 16: 78.0, 32: 53.0, 64: 46.0, 128: 39.0},
    "DeepEP README, low-latency kernels on H800 + CX7 IB (EP 8-128, 128 tokens, hidden 7168, "
    "top-8)")
NVLINK_ALL_TO_ALL = AllToAllAnchor(
    {8: 153.0}, {8: 153.0}, "DeepEP README, normal kernels intranode over NVLink (about 153 GB/s)")
# DeepEP publishes its low-latency kernels at 128 tokens only; a phase at a few tokens is held at
# least this long (an RDMA round trip plus the kernel's own synchronization) [assumed]
ALL_TO_ALL_FLOOR_US = 10.0
ALL_TO_ALL_FLOOR_SOURCE = "[assumed] 10 us per phase: DeepEP does not publish its kernels below " \
                          "128 tokens"
DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4 / 128  # FP8 with one fp32 scale per 128 elements
COMBINE_BYTES_PER_ELEMENT = 2.0  # BF16
SCALE_OUT_LATENCY_US = 5.0  # one hop over InfiniBand / RoCE, per allreduce across nodes [assumed]
HANDOFF_LATENCY_US = 10.0  # one pipeline hand-off (send + receive of activations) [assumed]


@dataclass(frozen=True)
class Layout:
    """One model instance's split: ``tp`` x ``pp`` GPUs, experts over ``ep`` of them, attention
    data-parallel or not, and whether communication overlaps compute."""

    tp: int = 1  # 0: the GPUs over pp (filled in by :meth:`on`)
    pp: int = 1
    ep: int = 1
    dp_attention: bool = False
    overlap: bool = False  # two-batch overlap: all-to-all hidden under the other batch's work

    def on(self, gpus: int) -> Layout:
        """This layout with ``tp`` filled in where it was left out (0): the GPUs over ``pp``."""
        return self if self.tp else replace(self, tp=max(1, gpus // self.pp))

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def label(self) -> str:
        parts = [f"TP{self.tp}"] + ([f"PP{self.pp}"] if self.pp > 1 else []) + \
            ([f"EP{self.ep}"] if self.ep > 1 else []) + \
            (["DP attention"] if self.dp_attention else [])
        return " ".join(parts)

    def checked(self, gpus: int, per_node: int, n_experts: int, origin: str) -> Layout:
        """This layout on ``gpus`` GPUs of ``per_node`` a node, for a model of ``n_experts``
        routed experts; a layout that does not fit is a one-line error naming ``origin``."""
        for key, value in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep)):
            if value < 1:
                raise ConfigError(f"{origin}: {key}={value}: must be at least 1")
        if gpus % self.gpus:
            raise ConfigError(f"{origin}: tp x pp = {self.tp} x {self.pp} = {self.gpus} GPUs "
                              f"does not divide the {gpus} GPUs given (each instance takes tp x "
                              "pp; the rest are replicas)")
        if self.ep > 1 and not n_experts:
            raise ConfigError(f"{origin}: ep={self.ep}: the model has no routed experts")
        if self.ep > 1 and (self.tp % self.ep or self.ep > n_experts):
            raise ConfigError(f"{origin}: ep={self.ep} must divide tp={self.tp} (experts spread "
                              f"within a pipeline stage) and be at most the model's {n_experts} "
                              "experts")
        if self.dp_attention and self.tp == 1:
            raise ConfigError(f"{origin}: dp_attention needs tp > 1 (attention is data-parallel "
                              "across the TP group)")
        if self.tp > per_node and self.tp % per_node:
            raise ConfigError(f"{origin}: tp={self.tp} spans nodes of {per_node} GPUs unevenly")
        return self

    def nodes(self, per_node: int) -> int:
        """Nodes one instance spans."""
        return max(1, math.ceil(self.gpus / per_node))


def busiest_share(local: int, hit_probability: float, ranks: int) -> float:
    """The expected most experts hit on one of ``ranks`` GPUs, each holding ``local`` experts of
    which each is hit with ``hit_probability``: the expected maximum of ``ranks`` binomial counts,
    ``sum over k of 1 - F(k) ** ranks`` (F the binomial CDF; the ranks taken as independent)."""
    if ranks <= 1 or hit_probability <= 0 or hit_probability >= 1:
        return local * min(1.0, max(0.0, hit_probability))
    expected, cdf = 0.0, 0.0
    for k in range(local):
        cdf += math.comb(local, k) * hit_probability ** k * (1 - hit_probability) ** (local - k)
        expected += 1 - min(1.0, cdf) ** ranks
    return expected


def all_to_all_us(tokens_per_gpu: float, top_k: int, hidden: int, ep: int,
                  intra_node: bool) -> tuple[float, float, str]:
    """(dispatch us, combine us, source) for one MoE layer's two all-to-alls: each GPU sends
    each of its tokens to ``top_k`` experts and gets them back, over NVLink inside one node
    else RDMA, each phase at least :data:`ALL_TO_ALL_FLOOR_US`."""
    anchor = NVLINK_ALL_TO_ALL if intra_node else RDMA_ALL_TO_ALL
    copies = tokens_per_gpu * top_k * hidden
    dispatch = copies * DISPATCH_BYTES_PER_ELEMENT / (anchor.gbs(ep, "dispatch") * 1e9) * 1e6
    combine = copies * COMBINE_BYTES_PER_ELEMENT / (anchor.gbs(ep, "combine") * 1e9) * 1e6
    return (max(ALL_TO_ALL_FLOOR_US, dispatch), max(ALL_TO_ALL_FLOOR_US, combine),
            f"{anchor.source}; {ALL_TO_ALL_FLOOR_SOURCE}")
