"""tok/s against accept length: the roofline line, the floor line, each class's measured point."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_specbound.atomic import replacing
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.result import ClassResult


def write_plot(path: Path, results: Sequence[ClassResult]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--specbound-plot needs matplotlib: pip install "
                          "'pytest-specbound[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[tuple[str, str], list[ClassResult]] = {}
    for r in results:
        if r.roofline and r.decode_tok_s is not None:
            groups.setdefault((r.budget, r.hardware), []).append(r)
    for (budget, hw), rs in groups.items():
        roof = rs[0].roofline
        assert roof is not None
        round_ms = roof.round_ms
        xs = [1 + i * (roof.max_accept - 1) / 50 for i in range(51)]
        label = f"{Path(budget).stem} on {hw}"
        ax.plot(xs, [x / round_ms * 1e3 for x in xs], label=f"roofline ({label})")
        effs = [r.min_efficiency for r in rs if r.min_efficiency]
        if effs:
            e = min(effs)
            ax.plot(xs, [e * x / round_ms * 1e3 for x in xs], "--",
                    label=f"floor {e:.2f} x roofline")
        for r in rs:
            color = "tab:green" if r.status == "pass" else "tab:red"
            x, y = r.accept_length or 1.0, r.decode_tok_s or 0.0
            ax.scatter([x], [y], color=color, zorder=3)
            ax.annotate(f"{r.class_name} {y:.0f}", (x, y), textcoords="offset points",
                        xytext=(5, -12), fontsize=8)
    ax.set_xlabel("accept length (tokens per verify step)")
    ax.set_ylabel("decode tok/s")
    ax.set_title("specbound: measured vs roofline")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
