"""The physical frontier across batch sizes: at each batch, the roofline's per-user decode rate
and the aggregate per GPU at one accept length, the ceiling a throughput-vs-interactivity
(Pareto) plot of measured levels sits under."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_specbound.physics.roofline import Roofline


@dataclass(frozen=True)
class FrontierPoint:
    batch: int
    round_ms: float
    per_user_tok_s: float
    aggregate_tok_s: float
    per_gpu_tok_s: float
    bound: str

    def to_json(self) -> dict[str, object]:
        return {"batch": self.batch, "round_ms": round(self.round_ms, 4),
                "per_user_tok_s": round(self.per_user_tok_s, 3),
                "aggregate_tok_s": round(self.aggregate_tok_s, 3),
                "per_gpu_tok_s": round(self.per_gpu_tok_s, 3), "bound": self.bound}


def frontier(roofline_at: Callable[[int], Roofline], batches: Sequence[int],
             accept: float | None = None) -> list[FrontierPoint]:
    """One point per batch (``accept`` default: the full accept length of the method)."""
    out = []
    for b in batches:
        roof = roofline_at(b)
        a = min(accept if accept is not None else float(roof.max_accept), float(roof.max_accept))
        per_user = roof.tok_s(a)
        gpus = max(1, roof.hardware.count) if roof.hardware.name != "cpu" else 1
        out.append(FrontierPoint(b, roof.round_ms, per_user, per_user * b, per_user * b / gpus,
                                 roof.bound))
    return out


def table(points: Sequence[FrontierPoint], accept: float | None) -> str:
    shown = f"accept {accept:g}" if accept is not None else "every draft accepted"
    lines = [f"frontier at {shown}:",
             f"{'batch':>6} {'round ms':>9} {'tok/s per user':>15} {'aggregate':>10} "
             f"{'per GPU':>9}  bound"]
    lines += [f"{p.batch:>6} {p.round_ms:>9.2f} {p.per_user_tok_s:>15.1f} "
              f"{p.aggregate_tok_s:>10.1f} {p.per_gpu_tok_s:>9.1f}  {p.bound}" for p in points]
    return "\n".join(lines)
