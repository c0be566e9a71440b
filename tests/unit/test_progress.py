import pytest

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.report.progress import Progress
from pytest_specbound.serving.records import RequestRecord


def m(n):
    return Measurement("x", [RequestRecord(completion_tokens=101, decode_s=1.0 + 0.01 * i,
                                           accept_length=3.0, accept_source="server")
                             for i in range(n)])


def test_tty_rewrites_one_line_every_record():
    out = []
    p = Progress(lambda text, rewrite: out.append((text, rewrite)), "b.toml::coding[h100]", True)
    for n in (1, 2, 3):
        p.update(m(n))
    assert len(out) == 3 and all(rw for _, rw in out)
    assert out[-1][0].startswith("specbound b.toml::coding[h100]: 3 requests, ")
    assert "tok/s" in out[-1][0] and "±" in out[-1][0] and "accept 3.00 (server)" in out[-1][0]


def test_non_tty_prints_periodic_lines():
    out = []
    p = Progress(lambda text, rewrite: out.append((text, rewrite)), "n", False, every_s=3600)
    for n in (1, 2, 3):
        p.update(m(n))
    assert len(out) == 1 and out[0][1] is False


@pytest.mark.parametrize("uptime_s", [1.0, 59.0, 3599.0, 1e6])
def test_first_line_goes_out_at_once_whatever_the_uptime(monkeypatch, uptime_s):
    """time.monotonic() counts from boot: a machine booted minutes ago must still see line one."""
    clock = iter([uptime_s, uptime_s + 1.0, uptime_s + 3601.0])
    monkeypatch.setattr("pytest_specbound.report.progress.time.monotonic", lambda: next(clock))
    out = []
    p = Progress(lambda text, rewrite: out.append(text), "n", False, every_s=3600)
    for n in (1, 2, 3):
        p.update(m(n))
    assert [t.split(":")[1].split(",")[0].strip() for t in out] == ["1 request", "3 requests"]
