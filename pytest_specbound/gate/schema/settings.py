"""Run settings, validated once: command line > environment > ini. (Markers override per test.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.values import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESOLUTION,
    ValueProblem,
    levels_text,
    number,
    whole_number,
)

INCONCLUSIVE = ("fail", "pass", "skip")


@dataclass(frozen=True)
class Option:
    name: str  # dest, e.g. "specbound_hw"
    flag: str
    env: str | None
    help: str
    default: str | None = None
    switch: bool = False  # a flag that takes no value (its environment variable: 1/0)


OPTIONS = (
    Option("specbound_hw", "--specbound-hw", "SPECBOUND_HW",
           "hardware: catalog NAME[xN] (a6000x2, h100x8), cpu, or auto (NVML)"),
    Option("specbound_url", "--specbound-url", "SPECBOUND_URL",
           "attach to a running server instead of launching the budget's command"),
    Option("specbound_launch", "--specbound-launch", "SPECBOUND_LAUNCH",
           "launch command overriding the budgets' ({host}, {port} filled in)"),
    Option("specbound_ca_bundle", "--specbound-ca-bundle", "SPECBOUND_CA_BUNDLE",
           "CA bundle for https servers (default: REQUESTS_CA_BUNDLE, SSL_CERT_FILE, certifi)"),
    Option("specbound_backend", "--specbound-backend", "SPECBOUND_BACKEND",
           "backend for --specbound-url (default: the budget's, else auto)"),
    Option("specbound_json", "--specbound-json", "SPECBOUND_JSON", "write results JSON here"),
    Option("specbound_benchmark_json", "--specbound-benchmark-json", None,
           "write a pytest-benchmark compatible JSON here"),
    Option("specbound_plot", "--specbound-plot", None, "write a tok/s vs accept plot (PNG) here"),
    Option("specbound_log_dir", "--specbound-log-dir", "SPECBOUND_LOG_DIR",
           "server logs go here", ".specbound/logs"),
    Option("specbound_samples", "--specbound-samples", "SPECBOUND_SAMPLES",
           "most measured requests per class", "64"),
    Option("specbound_min_samples", "--specbound-min-samples", None,
           "fewest measured requests per class before a verdict", "4"),
    Option("specbound_warmup", "--specbound-warmup", None,
           "uncounted requests per class (per stream at concurrency > 1)", "1"),
    Option("specbound_concurrency", "--specbound-concurrency", "SPECBOUND_CONCURRENCY",
           "concurrency levels for every class, overriding the budgets' (e.g. 1,4,16)"),
    Option("specbound_max_seconds", "--specbound-max-seconds", "SPECBOUND_MAX_SECONDS",
           "time budget per class in seconds", "600"),
    Option("specbound_confidence", "--specbound-confidence", "SPECBOUND_CONFIDENCE",
           "confidence level of the verdict intervals", f"{DEFAULT_CONFIDENCE:g}"),
    Option("specbound_resolution", "--specbound-resolution", "SPECBOUND_RESOLUTION",
           "relative miss of a threshold the verdict must catch, for classes that do not set "
           "resolution", f"{DEFAULT_RESOLUTION:g}"),
    Option("specbound_inconclusive", "--specbound-inconclusive", None,
           "what an inconclusive verdict counts as: fail, pass or skip", "fail"),
    Option("specbound_budgets", "--specbound-budgets", None,
           "where budget files are collected from (ini: specbound_budgets)", "budgets"),
    Option("specbound_baseline", "--specbound-baseline", "SPECBOUND_BASELINE",
           "compare each class with the last accepted run: a results JSON, or a folder of them"),
    Option("specbound_baseline_match", "--specbound-baseline-match", None,
           "a baseline from another machine or budget: warn (compared anyway, named) or strict "
           "(not compared)", "warn"),
    Option("specbound_until_precise", "--specbound-until-precise", "SPECBOUND_UNTIL_PRECISE",
           "keep measuring each class until its decode rate is known to a quarter of the "
           "resolution "
           "(for runs whose results serve as the next run's baseline)", switch=True),
    Option("specbound_speedup", "--specbound-speedup", "SPECBOUND_SPEEDUP",
           "also measure every budget's server without speculation and report the speedup",
           switch=True),
)
SWITCH_VALUES = {"1": True, "true": True, "yes": True, "on": True,
                 "0": False, "false": False, "no": False, "off": False}


@dataclass(frozen=True)
class Settings:
    hw: str | None
    url: str | None
    url_origin: str
    ca_bundle: str | None
    launch: str | None
    backend: str | None
    json_path: Path | None
    benchmark_json: Path | None
    plot: Path | None
    log_dir: Path
    samples: int
    min_samples: int
    warmup: int
    max_seconds: float
    confidence: float
    inconclusive: str
    budgets: tuple[str, ...]
    resolution: float
    concurrency: tuple[int, ...] | None = None  # overrides every class's levels
    speedup: bool = False  # measure every budget's twin without speculation
    baseline: Path | None = None  # the last accepted run's results (a file or a folder)
    baseline_origin: str = "--specbound-baseline"
    baseline_match: str = "warn"
    until_precise: bool = False  # every class measured until its rate is precise


def _levels(flag: str, text: str | None) -> tuple[int, ...] | None:
    """``1,4,16`` -> (1, 4, 16)."""
    if not text:
        return None
    try:
        return levels_text(text)
    except ValueProblem as exc:
        raise ConfigError(f"{flag}={text}: {exc}, comma-separated, e.g. 1,4,16") from None


def _int(flag: str, text: str, low: int) -> int:
    try:
        return whole_number(text, low)
    except ValueProblem as exc:
        raise ConfigError(f"{flag}={text}: {exc}") from None


def _float(flag: str, text: str, low: float, high: float | None = None,
           open_low: bool = False) -> float:
    try:
        return number(text, low, high, open_low)
    except ValueProblem as exc:
        raise ConfigError(f"{flag}={text}: {exc}") from None


def _switch(flag: str, text: str | None) -> bool:
    if not text:
        return False
    value = SWITCH_VALUES.get(text.strip().lower())
    if value is None:
        raise ConfigError(f"{flag}={text}: valid: {', '.join(SWITCH_VALUES)}")
    return value


def _existing(flag: str, text: str | None) -> Path | None:
    if text and not Path(text).exists():
        raise ConfigError(f"{flag}={text}: no such file or folder")
    return Path(text) if text else None


def _existing_file(flag: str, text: str | None) -> str | None:
    if text and not Path(text).is_file():
        raise ConfigError(f"{flag}={text}: no such file")
    return text or None


def output_path(flag: str, text: str | None, folder: bool = False) -> Path | None:
    """A file (or folder) the run will write, checked when the run starts: a results path that
    cannot be written must not end a run after every class was measured."""
    if not text:
        return None
    p = Path(text)
    if folder and p.exists() and not p.is_dir():
        raise ConfigError(f"{flag}={text}: is a file, not a folder")
    if not folder and p.is_dir():
        raise ConfigError(f"{flag}={text}: is a folder; name a file in it")
    parent = p if folder else p.parent
    existing = next((a for a in (parent, *parent.parents) if a.exists()), Path("."))
    if not existing.is_dir():
        raise ConfigError(f"{flag}={text}: cannot create the folder {parent}: {existing} is a "
                          "file")
    _try_writing(flag, text, p, parent, folder)
    return p


def _try_writing(flag: str, text: str, p: Path, parent: Path, folder: bool) -> None:
    """Create the folder and a scratch file in it (or open the file for appending): the
    permission bits say nothing to root, nor of a read-only mount or /proc."""
    import tempfile

    try:
        parent.mkdir(parents=True, exist_ok=True)
        if not folder and p.exists():
            with p.open("a", encoding="utf-8"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".specbound-check-"):
                pass
    except OSError as exc:
        what = "the file" if not folder and p.exists() else f"the folder {parent}"
        raise ConfigError(f"{flag}={text}: cannot write {what}: "
                          f"{exc.strerror or type(exc).__name__}") from None


def _merged(opt: Option, cli: Mapping[str, Any], env: Mapping[str, str],
            ini: Callable[[str], Any]) -> tuple[Any, str]:
    """The option's value and where it came from: CLI > env > ini > its default."""
    if cli.get(opt.name) is not None:
        return cli[opt.name], opt.flag
    if opt.env and env.get(opt.env):
        return env[opt.env], f"{opt.env} (environment)"
    ini_value = ini(opt.name)
    if ini_value not in (None, "", []):
        return ini_value, f"{opt.name} (ini)"
    return opt.default, opt.flag


def _check_choices(texts: Callable[[str], str | None], origin: Callable[[str], str]) -> None:
    """The options whose value must be one of a set, or parse as a URL or hardware string."""
    match = texts("specbound_baseline_match")
    if match not in ("warn", "strict"):
        raise ConfigError(f"{origin('specbound_baseline_match')}={match}: valid: warn, strict")
    inconclusive = texts("specbound_inconclusive")
    if inconclusive not in INCONCLUSIVE:
        raise ConfigError(f"{origin('specbound_inconclusive')}={inconclusive}: valid: "
                          f"{', '.join(INCONCLUSIVE)}")
    backend = texts("specbound_backend")
    if backend:
        from pytest_specbound.serving.backends import BACKENDS

        if backend not in BACKENDS:
            raise ConfigError(f"{origin('specbound_backend')}={backend}: unknown backend; valid: "
                              f"{', '.join(BACKENDS)}")
    url = texts("specbound_url")
    if url:
        from pytest_specbound.serving.urls import split_url

        split_url(url, origin("specbound_url"))
    hw = texts("specbound_hw")
    if hw is not None and not hw.strip():
        raise ConfigError(f"{origin('specbound_hw')}: empty; e.g. a6000x2, h100x8, cpu, auto")


def resolve(
    cli: Mapping[str, Any], env: Mapping[str, str], ini: Callable[[str], Any]
) -> Settings:
    """Merge sources (CLI > env > ini > the option's default) and validate every value."""
    raw = {opt.name: _merged(opt, cli, env, ini) for opt in OPTIONS}

    def text(name: str) -> str | None:
        v = raw[name][0]
        return None if v is None else (" ".join(v) if isinstance(v, list) else str(v))

    def origin(name: str) -> str:
        return raw[name][1]

    def given(name: str) -> str:  # an option with a default: never None
        return text(name) or ""

    _check_choices(text, origin)
    budgets_raw = raw["specbound_budgets"][0]
    budgets = tuple(budgets_raw) if isinstance(budgets_raw, list) else tuple(
        str(budgets_raw).split())
    samples = _int(origin("specbound_samples"), given("specbound_samples"), 1)
    # three requests at least: with two, one degree of freedom makes every interval useless
    min_samples = _int(origin("specbound_min_samples"), given("specbound_min_samples"), 3)
    hw = text("specbound_hw")
    return Settings(
        hw=hw.strip() if hw else None,
        url=text("specbound_url"),
        url_origin=origin("specbound_url"),
        ca_bundle=_existing_file(origin("specbound_ca_bundle"), text("specbound_ca_bundle")),
        launch=text("specbound_launch"),
        backend=text("specbound_backend"),
        json_path=output_path(origin("specbound_json"), text("specbound_json")),
        benchmark_json=output_path(origin("specbound_benchmark_json"),
                                   text("specbound_benchmark_json")),
        plot=output_path(origin("specbound_plot"), text("specbound_plot")),
        log_dir=output_path(origin("specbound_log_dir"), given("specbound_log_dir"),
                            folder=True) or Path(given("specbound_log_dir")),
        samples=samples,
        min_samples=min(min_samples, max(samples, 3)),
        warmup=_int(origin("specbound_warmup"), given("specbound_warmup"), 0),
        max_seconds=_float(origin("specbound_max_seconds"), given("specbound_max_seconds"), 0,
                           open_low=True),
        confidence=_float(origin("specbound_confidence"), given("specbound_confidence"), 0, 1,
                          open_low=True),
        inconclusive=given("specbound_inconclusive"),
        budgets=budgets,
        resolution=_float(origin("specbound_resolution"), given("specbound_resolution"),
                          0.005, 0.5),
        concurrency=_levels(origin("specbound_concurrency"), text("specbound_concurrency")),
        speedup=_switch(origin("specbound_speedup"), text("specbound_speedup")),
        baseline=_existing(origin("specbound_baseline"), text("specbound_baseline")),
        baseline_origin=origin("specbound_baseline"),
        baseline_match=given("specbound_baseline_match"),
        until_precise=_switch(origin("specbound_until_precise"), text("specbound_until_precise")),
    )
