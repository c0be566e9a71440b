"""A ready, checked server for a planned class, before anything is measured: launched or
attached (through the run's pool) and ready, its model and settings read where its counters
are (the decode server, where prefill and decode run apart) and checked against the budget.
The measuring pipeline (:mod:`pytest_specbound.gate.pipeline.runner`) takes what this gives."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specbound.errors import ServerError
from pytest_specbound.gate.pipeline.crosscheck import mismatches
from pytest_specbound.gate.pipeline.plan import ClassPlan
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.serving.backends.base import Backend
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.records import ServerInfo
from pytest_specbound.serving.server import Server
from pytest_specbound.serving.settings import Served
from pytest_specbound.serving.transport import Endpoint


@dataclass(frozen=True)
class ReadyServer:
    """A server ready to measure: its process or URL, its family's backend, where its counters
    are read (``at``), what it serves (``info``) and runs (``served``), and what it is (its
    launch command, or its URL)."""

    server: Server
    backend: Backend
    at: Endpoint
    info: ServerInfo
    served: Served
    command: str | None


def ready_server(plan: ClassPlan, pool: ServerPool) -> ReadyServer:
    """The plan's server from the pool (launched once, or attached), ready and checked."""
    server, backend = pool.get(plan.server, dict(plan.values), name=plan.budget.path.stem)
    at = decode_endpoint(plan, server)
    info, served = checked_server(plan, server, backend, at)
    command = launched_command(server, plan.server) if server.owned else server.url
    return ReadyServer(server, backend, at, info, served, command)


def launched_command(server: Server, cfg: ServerConfig) -> str | None:
    """The command the server was started with (placeholders filled), where we started it."""
    import shlex

    if isinstance(server.argv, list):
        return shlex.join(server.argv)
    return server.argv or cfg.launch


def check_served_model(budget: Budget, info: ServerInfo, roof: Roofline) -> None:
    """The budget's model must be what the server serves (the ids it reports)."""
    served = [*info.models, *([info.model_path] if info.model_path else [])]
    if not served:
        return
    expected = [budget.model.served_name] if budget.model.served_name else [roof.model.name]
    norm = [_norm(e) for e in expected]
    if any(n and n in _norm(s) for n in norm for s in served):
        return
    raise ServerError(
        f"wrong model behind the server: budget {budget.path} expects '{expected[0]}', server "
        f"serves {', '.join(served)} (set [model] served_name, or [server] check_model = false)"
    )


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower().rsplit("/", 1)[-1] if ch.isalnum())


def decode_endpoint(plan: ClassPlan, server: Server) -> Endpoint:
    """Where the server's counters and settings are read: the decode server where prefill and
    decode run apart (the router in front reports neither), else the server itself."""
    split = plan.budget.disaggregated
    if split is None:
        return server.endpoint
    ep = server.endpoint
    return Endpoint(split.decode_url, ep.key, ep.read_timeout_s, plan.server.ca_bundle,
                    origin=split.origin)


def checked_server(plan: ClassPlan, server: Server, backend: Backend,
                   at: Endpoint | None = None) -> tuple[ServerInfo, Served]:
    """What the server serves and runs (read at ``at``: :func:`decode_endpoint`), checked
    against the budget (a mismatch is an error)."""
    at = at or decode_endpoint(plan, server)
    info = backend.info(at)
    if plan.server.check_model:
        check_served_model(plan.budget, info, plan.roof)
    served = backend.served(at, info, launched_command(server, plan.server)
                            if at is server.endpoint else None)
    found = mismatches(plan.budget, plan.hw, served) if plan.server.check_settings else []
    if found:
        raise ServerError("the server does not run what the budget describes: "
                          + "; ".join(found) + " (set [server] check_settings = false "
                          "to measure anyway)")
    return info, served


