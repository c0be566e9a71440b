"""How exactly and how cheaply the client measures, side by side in one run.

1. A local emitter (its own process) sends tokens at known rates (1k, 5k, 20k tok/s) in bursts of a
   set accept length. For our client and for a naive requests-based SSE loop: measured tok/s over the
   true rate, accept length vs the truth, client CPU time per token.
2. A real llama-server on this machine: the server's own decode rate (its timings) while our client
   measures, over the same under a minimal client that reads and discards bytes, interleaved.
Targets: measured/true >= 0.999 at 5k tok/s; the transport's CPU per token within 1.5x of a bare
recv loop; server rate ratio >= 0.98.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.measure.sampler import Sampler  # noqa: E402
from pytest_specbound.serving.backends.base import Prompt  # noqa: E402
from pytest_specbound.serving.backends.llamacpp import LlamaCpp  # noqa: E402
from pytest_specbound.serving.transport import Endpoint  # noqa: E402

TOKENS = 2001
ACCEPT = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def naive_requests(url: str) -> tuple[float, float, int]:
    """The loop most benchmark scripts write: requests + iter_lines + json.loads per event."""
    import requests

    cpu = time.process_time()
    r = requests.post(url + "/completion", json={"prompt": "x", "stream": True}, stream=True)
    times = []
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            obj = json.loads(line[6:])
            if obj.get("tokens"):
                times.append(time.perf_counter())
    cpu = time.process_time() - cpu
    return (len(times) - 1) / (times[-1] - times[0]), cpu, len(times)


def bare_socket(url: str) -> tuple[float, float, int]:
    """The floor: a blocking recv loop that timestamps reads and parses nothing."""
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    body = b'{"prompt": "x"}'
    cpu = time.process_time()
    s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    times = []
    while True:
        data = s.recv(1 << 16)
        if not data:
            break
        times.append(time.perf_counter())
    cpu = time.process_time() - cpu
    s.close()
    return 0.0, cpu, TOKENS


def ours(sampler: Sampler) -> tuple[float, float, int, float]:
    """One whole request as the plugin makes it (one sampler per class, so no metrics scrapes
    once the server's own fields carry accept and clock): transport, parsing, accept, checks."""
    cpu = time.process_time()
    rec = sampler.one(Prompt(text="x"), TOKENS)
    cpu = time.process_time() - cpu
    return rec.decode_tok_s or 0.0, cpu, rec.completion_tokens, rec.accept_length or 0.0


def transport(url: str) -> tuple[float, float, int]:
    """The client's CPU while the server streams (send to last byte): what competes with a server
    on the same machine, and what the bare loop compares with. Parsing comes after the stream."""
    endpoint = Endpoint(url)
    path, body = LlamaCpp().build_request(Prompt(text="x"), TOKENS, None)
    result = endpoint.stream(path, body)
    return 0.0, result.streaming_cpu_s, len(result.events)


def paired(xs: list[tuple[float, ...]], ys: list[tuple[float, ...]]) -> float:
    """Median of the per-round ratios of CPU per token: each round's pair ran back to back."""
    return statistics.median((x[1] / x[2]) / (y[1] / y[2]) for x, y in zip(xs, ys, strict=True))


def emitter_table() -> float:
    print(f"{'rate':>7} {'client':<9} {'measured/true':>13} {'accept':>7} {'CPU us/token':>13}"
          "   (ours: a whole request, parsing included; streaming: send to last byte)")
    headline, worst_streaming, worst_whole = 0.0, 0.0, 0.0
    for rate in (1000, 5000, 20000):
        port = free_port()
        proc = subprocess.Popen([sys.executable, str(HERE / "_emitter.py"), str(port), str(rate),
                                 str(ACCEPT), str(TOKENS)])
        time.sleep(0.5)
        url = f"http://127.0.0.1:{port}"
        try:
            sampler = Sampler(Endpoint(url), LlamaCpp())
            sampler.one(Prompt(text="x"), TOKENS)  # warm-up, as a class measurement has
            o, n, b, t = [], [], [], []
            for _ in range(11):  # interleaved, so drift hits all four alike
                o.append(ours(sampler))
                t.append(transport(url))
                n.append(naive_requests(url))
                b.append(bare_socket(url))
        finally:
            proc.kill()
        o_ratio = statistics.median(x[0] for x in o) / rate
        n_ratio = statistics.median(x[0] for x in n) / rate
        o_cpu = statistics.median(x[1] / x[2] for x in o) * 1e6
        n_cpu = statistics.median(x[1] / x[2] for x in n) * 1e6
        b_cpu = statistics.median(x[1] / x[2] for x in b) * 1e6
        t_cpu = statistics.median(x[1] / x[2] for x in t) * 1e6
        acc = statistics.median(x[3] for x in o)
        whole, streaming = paired(o, b), paired(t, b)
        print(f"{rate:>7} {'ours':<9} {o_ratio:>13.4f} {acc:>7.2f} {o_cpu:>13.1f}")
        print(f"{rate:>7} {'streaming':<9} {'-':>13} {'-':>7} {t_cpu:>13.1f}")
        print(f"{rate:>7} {'naive':<9} {n_ratio:>13.4f} {'-':>7} {n_cpu:>13.1f}")
        print(f"{rate:>7} {'bare recv':<9} {'-':>13} {'-':>7} {b_cpu:>13.1f}"
              f"   (paired: ours / bare = {whole:.2f}, streaming / bare = {streaming:.2f})")
        if rate == 5000:
            headline = o_ratio
        worst_streaming = max(worst_streaming, streaming)
        worst_whole = max(worst_whole, whole)
    print(f"CPU per token over a bare recv loop, worst rate: while streaming {worst_streaming:.2f}"
          f" (target <= 1.5); whole request, parsing after the stream included {worst_whole:.2f}")
    return headline


def minimal_client(url: str, body: bytes) -> float:
    """Read and discard the stream; parse only the last event (the server's timings)."""
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    chunks = []
    while True:
        data = s.recv(1 << 16)
        if not data:
            break
        chunks.append(data)
    s.close()
    text = b"".join(chunks)
    last = text[text.rfind(b'{"index"') if b'"timings"' in text else 0:]
    timings = json.loads(last[last.find(b"{"):last.rfind(b"}") + 1])["timings"]
    return float(timings["predicted_per_second"])


def llama_server_table() -> float | None:
    try:
        from pytest_specbound.physics.demo import demo_models
        from pytest_specbound.serving.backends.llamacpp import llama_server_binary
    except Exception as exc:  # pragma: no cover - missing extra
        print(f"llama-server part skipped: {exc}")
        return None
    from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server

    models = demo_models()
    argv = [llama_server_binary(), "-m", models["demo_gguf"], "--host", "{host}", "--port",
            "{port}", "-t", "1", "-c", "2048", "-np", "1"]
    server = start_server(LaunchSpec(argv), Readiness(("/health",), 120), Path(".specbound/logs"))
    prompt = Prompt(text="Count from one to a hundred.")
    body = json.dumps(LlamaCpp().build_request(prompt, 128, None)[1]).encode()  # the same work
    try:
        sampler = Sampler(server.endpoint, LlamaCpp())
        ours_rates, minimal_rates = [], []
        sampler.one(Prompt(text="warm up"), 32)
        for _ in range(12):
            rec = sampler.one(prompt, 128)
            ours_rates.append(rec.server_decode_tok_s or 0.0)
            minimal_rates.append(minimal_client(server.url, body))
    finally:
        server.stop()
    a, b = statistics.median(ours_rates), statistics.median(minimal_rates)
    print("\nllama-server (demo model, 1 thread): server's own decode rate")
    print(f"{'while our client measures':<32} {a:8.1f} tok/s")
    print(f"{'under a minimal client':<32} {b:8.1f} tok/s")
    print(f"ratio {a / b:.3f} (target >= 0.98)")
    return a / b


def main() -> None:
    head = emitter_table()
    ratio = llama_server_table()
    extra = f"; server-rate ratio {ratio:.3f}" if ratio else ""
    print(f"headline: measured/true at 5k tok/s = {head:.4f}{extra}")


if __name__ == "__main__":
    main()
