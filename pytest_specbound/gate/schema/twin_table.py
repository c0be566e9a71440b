"""``[no_speculation]``: the server without speculation a budget is compared with."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specbound._toml import TomlTable
from pytest_specbound.gate.schema.where import Where

TWIN_KEYS = {"launch", "url", "ready_timeout_s", "recheck"}
MAX_RECHECK = 64


@dataclass(frozen=True)
class NoSpeculation:
    """``[no_speculation]``: the server without speculation. Neither ``launch`` nor ``url``:
    the budget's own launch command with its speculation flags removed."""

    launch: str | None = None
    url: str | None = None
    ready_timeout_s: float | None = None
    origin: str = ""  # where the table is, for errors
    # requests of the twin measured again after each class (the drift check); None: the default
    recheck: int | None = None



def parse_twin(w: Where, data: TomlTable) -> NoSpeculation | None:
    """``[no_speculation]``: an optional launch or url of the server without speculation."""
    if "no_speculation" not in data:
        return None
    t = w.table(data, "no_speculation", required=False)
    w.check_keys("no_speculation", t, TWIN_KEYS)
    if "launch" in t and "url" in t:
        raise w.error("no_speculation", "url", "give launch or url, not both")
    launch, url = w.string("no_speculation", t, "launch"), w.string("no_speculation", t, "url")
    if url:
        from pytest_specbound.serving.urls import split_url

        split_url(url, w.name("no_speculation", "url"))
    timeout = w.number("no_speculation", t, "ready_timeout_s", low=1)
    recheck = w.number("no_speculation", t, "recheck", integer=True, low=0, high=MAX_RECHECK)
    if recheck == 1:
        raise w.error("no_speculation", "recheck", "give 0 (no drift check) or 2 to "
                      f"{MAX_RECHECK} requests: one request has no spread to test against")
    return NoSpeculation(launch, url, None if timeout is None else float(timeout),
                         w.name("no_speculation", "url" if url else "launch" if launch else ""),
                         recheck)
