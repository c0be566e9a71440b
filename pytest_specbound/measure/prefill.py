"""Other requests' prompts in a request's rounds: the roofline floor of a closed-loop level.

At concurrency above one a continuous-batching server computes a newcomer's prompt in the rounds
the others are decoding in, so their rounds take longer by at least the prompt's matmuls at the
prefill ceiling, less the compute a memory-bound round leaves idle
(:meth:`~pytest_specbound.physics.roofline.Roofline.prefill_ms`). A request's floor is its own
rounds at the roofline plus that time for the prompt tokens computed while it decoded
(:mod:`pytest_specbound.measure.overlap`). Without it the efficiency of a level would depend on
the prompt and output lengths of the workload, not only on the system.
"""

from __future__ import annotations

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.overlap import Overlap
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.serving.records import RequestRecord


def rounds_and_prefill_ms(r: RequestRecord, overlap: Overlap | None, roof: Roofline,
                          fixed_accept: float) -> tuple[float, float]:
    """(verify rounds, least prefill ms added to them) for one timed request; its accept is
    its own where it has one, else ``fixed_accept``, at most the roofline's maximum."""
    accept = r.decode_tokens / r.verify_steps if r.verify_steps else fixed_accept
    rounds = r.decode_tokens / min(accept, float(roof.max_accept))
    return rounds, roof.prefill_ms(overlap.prefill_tokens if overlap else 0.0, rounds)


def context_of(r: RequestRecord, default: float) -> float:
    """A request's mean context over its decode: its prompt and half its output (``default``,
    the budget's context, where the server did not say how long the prompt was)."""
    if not r.prompt_tokens:
        return default
    return r.prompt_tokens + r.completion_tokens / 2


def floor_s(r: RequestRecord, overlap: Overlap | None, roof: Roofline,
            fixed_accept: float) -> float:
    """The least decode time of one request: its rounds at the roofline (at its own context)
    plus others' prefill."""
    rounds, prefill = rounds_and_prefill_ms(r, overlap, roof, fixed_accept)
    return (rounds * roof.at_context(context_of(r, roof.context)).round_ms + prefill) / 1e3


def level_roofline(m: Measurement, roof: Roofline) -> Roofline:
    """``roof`` at the requests' own context (their mean over the rounds) with the level's
    measured ``prefill`` per round (unchanged when there are no requests)."""
    fixed = m.window_accept or 1.0
    pairs = m.timed_overlaps()
    parts = [rounds_and_prefill_ms(r, o, roof, fixed) for r, o in pairs]
    rounds = sum(n for n, _ in parts)
    if rounds <= 0:
        return roof
    context = sum(n * context_of(r, roof.context) for (n, _), (r, _) in zip(parts, pairs,
                                                                              strict=True))
    return roof.at_context(context / rounds).with_prefill(sum(p for _, p in parts) / rounds)
