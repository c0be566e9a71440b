"""Does the N-stream client keep up? Two ratios at N = 16, side by side in one run.

1. Fidelity: a local emitter (its own process, one exact schedule per stream) streams 16 requests
   at once, each at a known rate in bursts of a set accept length, on one step clock like a
   batching server. The closed-loop client's measured decode rate per request over the
   emitter's true one (pooled: tokens over summed decode times; and the range over requests).
   Target >= 0.999. Reads are stamped by the kernel (SO_TIMESTAMPNS) with the arrival of their
   newest bytes, so a late-running client thread no longer delays the last token's stamp; a
   first token that shares its read with later ones still takes their stamp (ratios above 1).
2. Load on a real server: llama-server with 16 slots on this machine. The server's own decode
   rate (its per-request timings) while our 16-stream closed loop measures, over the same under
   a minimal 16-thread client that sends the same request and discards the stream, in
   interleaved rounds. Target >= 0.98.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.measure.load import measure_closed_loop, stream_samplers  # noqa: E402
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload  # noqa: E402
from pytest_specbound.serving.backends.base import Prompt  # noqa: E402
from pytest_specbound.serving.backends.llamacpp import LlamaCpp  # noqa: E402
from pytest_specbound.serving.transport import Endpoint  # noqa: E402

STREAMS = 16
TOKENS = 1201
ACCEPT = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_loop(url: str, n: int, requests: int, tokens: int, prompt: Prompt):
    base = Sampler(Endpoint(url), LlamaCpp())
    return measure_closed_loop(stream_samplers(base, n), Workload([prompt], tokens, warmup=1),
                               Stopping(FixedCount(requests)))


def fidelity_table() -> float:
    print(f"{'streams':>7} {'rate/stream':>11} {'measured/true':>13} {'per request':>17} "
          f"{'in flight':>9} {'untimed':>7}")
    headline = 0.0
    for n, rate in ((1, 1000), (4, 1000), (16, 1000), (16, 2000)):  # per-stream rates
        port = free_port()
        proc = subprocess.Popen([sys.executable, str(HERE / "_multi_emitter.py"), str(port),
                                 str(rate), str(ACCEPT), str(TOKENS)])
        time.sleep(0.5)
        try:
            m = closed_loop(f"http://127.0.0.1:{port}", n, 3 * n, TOKENS, Prompt(text="x"))
        finally:
            proc.kill()
        recs = [r for r in m.records if r.ok and r.server_decode_s and r.clock == "client"]
        pooled = (sum(r.server_decode_s or 0.0 for r in recs) / sum(r.decode_s for r in recs)
                  if recs else float("nan"))
        each = [(r.server_decode_s or 0.0) / r.decode_s for r in recs] or [float("nan")]
        spread = f"{min(each):.5f}-{max(each):.5f}"
        print(f"{n:>7} {rate:>11} {pooled:>13.5f} {spread:>17} {m.in_flight or 0:>9.2f} "
              f"{len(m.untimed):>7}")
        if n == STREAMS and rate == 1000:
            headline = pooled
    return headline


def minimal_stream(url: str, body: bytes, out: list[float], stop: threading.Event) -> None:
    """Send, read and discard until the end; parse only the final event's timings."""
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    while not stop.is_set():
        s = socket.create_connection((host, port))
        s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        tail = b""
        while True:
            data = s.recv(1 << 16)
            if not data:
                break
            tail = (tail + data)[-8192:]
        s.close()
        start = tail.rfind(b'"timings"')
        if start < 0:
            continue
        obj = json.loads(tail[tail.rfind(b"data: ", 0, start) + 6:].split(b"\n\n")[0])
        out.append(float(obj["timings"]["predicted_per_second"]))


def minimal_round(url: str, body: bytes, n: int, requests: int) -> list[float]:
    rates: list[float] = []
    stop = threading.Event()
    threads = [threading.Thread(target=minimal_stream, args=(url, body, rates, stop), daemon=True)
               for _ in range(n)]
    for t in threads:
        t.start()
    while len(rates) < requests:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    return rates[:requests]


def server_table() -> float | None:
    try:
        from pytest_specbound.physics.demo import demo_models
        from pytest_specbound.serving.backends.llamacpp import llama_server_binary
    except Exception as exc:  # pragma: no cover - missing extra
        print(f"llama-server part skipped: {exc}")
        return None
    from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server

    models = demo_models()
    argv = [llama_server_binary(), "-m", models["demo_gguf"], "--host", "{host}", "--port",
            "{port}", "-t", "1", "-np", str(STREAMS), "-c", str(STREAMS * 512)]
    server = start_server(LaunchSpec(argv), Readiness(("/health",), 120), Path(".specbound/logs"))
    prompt = Prompt(text="Count from one to a hundred.")
    tokens, requests = 64, 2 * STREAMS
    body = json.dumps(LlamaCpp().build_request(prompt, tokens, None)[1]).encode()  # same work
    ours, minimal = [], []
    try:
        closed_loop(server.url, STREAMS, STREAMS, tokens, prompt)  # warm-up of every slot
        for _ in range(5):  # interleaved rounds, so drift hits both alike
            m = closed_loop(server.url, STREAMS, requests, tokens, prompt)
            ours.append(statistics.median(r.server_decode_tok_s or 0.0 for r in m.records))
            minimal.append(statistics.median(minimal_round(server.url, body, STREAMS, requests)))
    finally:
        server.stop()
    ratio = statistics.median(a / b for a, b in zip(ours, minimal, strict=True))
    print(f"\nllama-server (demo model, 1 thread, {STREAMS} slots): the server's own decode rate "
          "per request, median per round")
    print(f"{'round':>5} {'our client':>11} {'minimal':>9} {'ratio':>6}")
    for k, (a, b) in enumerate(zip(ours, minimal, strict=True)):
        print(f"{k + 1:>5} {a:>11.1f} {b:>9.1f} {a / b:>6.3f}")
    return ratio


def main() -> None:
    fidelity = fidelity_table()
    ratio = server_table()
    extra = f"; server rate under our client / a minimal one {ratio:.3f} (target >= 0.98)" \
        if ratio is not None else ""
    print(f"headline at N = {STREAMS}: measured/true {fidelity:.5f} (target >= 0.999){extra}")


if __name__ == "__main__":
    main()
