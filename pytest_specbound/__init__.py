"""pytest-specbound: gate LLM-inference deploys on physics.

The core is plain Python and never imports pytest; ``plugin/`` and ``cli.py`` are the two shells
over it. The stages, in data-flow order: ``physics`` (hardware, models, roofline), ``serving``
(server lifecycle, transport, backends), ``measure`` (prompts, sampler, statistics), ``gate``
(budgets, settings, verdicts, references, runner), ``advisers`` (plan-spec,
calibrate), ``report``.

Scripting the core::

    from pytest_specbound import compute_roofline, load_model, parse_hardware, parse_speculation
    roof = compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))
    roof.tok_s(3.08)  # 72.8

Names are imported on first use, so ``import pytest_specbound`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pytest_specbound.version import __version__

_API = {
    "compute_roofline": "pytest_specbound.physics.roofline",
    "Roofline": "pytest_specbound.physics.roofline",
    "Deployment": "pytest_specbound.physics.roofline",
    "parse_hardware": "pytest_specbound.physics.hardware",
    "detect_hardware": "pytest_specbound.physics.hardware",
    "load_model": "pytest_specbound.physics.models",
    "parse_speculation": "pytest_specbound.physics.speculative",
    "load_budget": "pytest_specbound.gate.schema.budget",
    "parse_budget": "pytest_specbound.gate.schema.budget",
    "measure": "pytest_specbound.measure.sampler",
    "Sampler": "pytest_specbound.measure.sampler",
    "FixedCount": "pytest_specbound.measure.sampler",
    "Endpoint": "pytest_specbound.serving.transport",
    "open_server": "pytest_specbound.serving.connect",
    "ServerConfig": "pytest_specbound.serving.connect",
    "get_backend": "pytest_specbound.serving.backends",
    "load_prompts": "pytest_specbound.measure.prompts",
    "judge": "pytest_specbound.gate.judging.judge",
    "Judging": "pytest_specbound.gate.judging.judge",
    "plan_class": "pytest_specbound.gate.pipeline.plan",
    "GateRun": "pytest_specbound.gate.pipeline.run",
    "Verdict": "pytest_specbound.gate.verdicts.verdict",
    "run_class": "pytest_specbound.gate.pipeline.runner",
    "ClassResult": "pytest_specbound.gate.verdicts.result",
    "Measurement": "pytest_specbound.measure.measurement",
    "RequestRecord": "pytest_specbound.serving.records",
}
__all__ = [
    "ClassResult",
    "Deployment",
    "Endpoint",
    "FixedCount",
    "GateRun",
    "Judging",
    "Measurement",
    "RequestRecord",
    "Roofline",
    "Sampler",
    "ServerConfig",
    "Verdict",
    "__version__",
    "compute_roofline",
    "detect_hardware",
    "get_backend",
    "judge",
    "load_budget",
    "load_model",
    "load_prompts",
    "measure",
    "open_server",
    "parse_budget",
    "parse_hardware",
    "parse_speculation",
    "plan_class",
    "run_class",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from pytest_specbound.gate.judging.judge import Judging, judge
    from pytest_specbound.gate.pipeline.plan import plan_class
    from pytest_specbound.gate.pipeline.run import GateRun
    from pytest_specbound.gate.pipeline.runner import run_class
    from pytest_specbound.gate.schema.budget import load_budget, parse_budget
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.gate.verdicts.verdict import Verdict
    from pytest_specbound.measure.measurement import Measurement
    from pytest_specbound.measure.prompts import load_prompts
    from pytest_specbound.measure.sampler import FixedCount, Sampler, measure
    from pytest_specbound.physics.hardware import detect_hardware, parse_hardware
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import Deployment, Roofline, compute_roofline
    from pytest_specbound.physics.speculative import parse_speculation
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.connect import ServerConfig, open_server
    from pytest_specbound.serving.records import RequestRecord
    from pytest_specbound.serving.transport import Endpoint


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'pytest_specbound' has no attribute {name!r}")
