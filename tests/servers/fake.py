"""Protocol-faithful test servers for SGLang, vLLM, llama.cpp, TRT-LLM and TGI.

Each speaks its family's endpoints, field names, SSE framing and metric names as
shared/reference/server-apis.md documents them, and emits tokens on a scripted schedule of verify
steps: the first token from prefill, then ``steps`` verify steps, each emitting its tokens at once.
Fault modes (``fault=...``) make it misbehave the ways real servers do.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("die", "stall", "truncate", "badjson", "http400", "http500", "nometrics",
          "streamerror", "redirect", "ratelimit", "json200", "html200", "sigill")


@dataclass
class Script:
    steps: list[int] = field(default_factory=lambda: [4] * 10)  # tokens per verify step
    step_s: float = 0.004  # time per verify step
    # each request's steps take step_s times a factor drawn from [1 - jitter, 1 + jitter]: a real
    # server's spread between requests, beside which a busy box's few-% drift is noise
    jitter: float = 0.0
    ttft_s: float = 0.01
    model: str = "test-model"
    fault: str | None = None
    fault_after: int = 3  # events before a mid-stream fault
    per_request_metrics: bool = True  # vLLM --per-request-spec-decode-metrics
    num_spec_tokens: int = 3  # vLLM's num_speculative_tokens: drafts a step
    request_log: str | None = None  # append "TAG PATH" per completion request (launched fakes)
    request_tag: str = "-"
    ready_after_s: float = 0.0
    burst: bool = False  # write the whole stream at the end in one go (a server that buffers)
    slots: int | None = None  # generation requests served at once; the rest wait (llama -np)
    # vLLM/SGLang --stream-interval: the first token at once, then an event when this many have
    # gathered (so N to N + accept - 1 tokens each), the rest when the request ends
    stream_interval: int = 1
    encoding: str | None = None  # a gateway that compresses the stream (gzip, deflate, br) anyway
    api_key: str | None = None  # vLLM --api-key: /v1/* needs "Authorization: Bearer KEY"
    auth_all: bool = False  # a gateway in front: every route needs the key, /health too
    drafted: bool = True  # False: llama-server drafted nothing, and leaves draft_n out
    server_info: dict[str, Any] = field(default_factory=dict)  # SGLang /server_info, over ours
    # vLLM with VLLM_SERVER_DEV_MODE=1: the engine config its /server_info dumps (None: no route);
    # text_config: an older vLLM that gives str(vllm_config) whatever config_format asks
    vllm_config: dict[str, Any] | None = None
    text_config: bool = False

    def request_step_s(self) -> float:
        """The time per verify step of one request (its own draw of the jitter)."""
        return self.step_s * random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter \
            else self.step_s

    def draft_fields(self) -> dict[str, int]:
        """llama-server's per-request draft counters (absent where it drafted nothing)."""
        if not self.drafted:
            return {}
        return {"draft_n": 3 * len(self.steps), "draft_n_accepted": sum(k - 1 for k in self.steps)}

    @property
    def completion_tokens(self) -> int:
        return 1 + sum(self.steps)


def vllm_config_text(config: dict[str, Any]) -> str:
    """vLLM's ``str(VllmConfig)``: one line of ``key=value`` pairs (vllm/config/vllm.py)."""
    model, parallel = config.get("model_config", {}), config.get("parallel_config", {})
    return (f"model={model.get('model', 'm')!r}, "
            f"speculative_config={config.get('speculative_config')!r}, "
            f"dtype={model.get('dtype', 'torch.bfloat16')}, max_seq_len=2048, "
            f"tensor_parallel_size={parallel.get('tensor_parallel_size', 1)}, "
            f"pipeline_parallel_size={parallel.get('pipeline_parallel_size', 1)}, "
            f"data_parallel_size={parallel.get('data_parallel_size', 1)}, "
            f"decode_context_parallel_size=1, enforce_eager={model.get('enforce_eager', False)}")


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, float] = {}
        self.iterations: list[dict[str, Any]] = []  # TRT-LLM iteration stats queue

    def add(self, name: str, value: float) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0.0) + value

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


class FakeServer:
    """Run with ``with FakeServer("vllm") as s: s.url``."""

    def __init__(self, family: str, script: Script | None = None, host: str = "127.0.0.1",
                 tls: tuple[str, str] | None = None) -> None:
        """``tls`` = (certificate file, key file) serves https."""
        self.family = family
        self.script = script or Script()
        self.counters = Counters()
        self.started = time.monotonic()
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most generation requests served at the same moment
        self.host = host
        self.scheme = "https" if tls else "http"
        handler = type("Handler", (_Handler,), {"server_ref": self})
        server_cls = ThreadingHTTPServer
        if ":" in host:
            import socket

            server_cls = type("V6Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
        self.httpd = server_cls((host, 0), handler)
        if tls:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._lock = threading.Lock()
        self.slots = threading.Semaphore(self.script.slots) if self.script.slots else None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.httpd.server_address[1]}"

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_ref: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------------------
    @property
    def s(self) -> Script:
        return self.server_ref.script

    def _json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, text: str, status: int = 200) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        if self.s.encoding:
            import zlib

            self.send_header("Content-Encoding", self.s.encoding)
            wbits = {"gzip": 31, "deflate": 15}.get(self.s.encoding)
            self._gzip = zlib.compressobj(6, zlib.DEFLATED, wbits) if wbits else None
        self.end_headers()
        self._events = 0

    def _write(self, raw: bytes) -> None:
        if getattr(self, "_gzip", None):  # nginx's gzip on a stream: a sync flush per event
            import zlib

            raw = self._gzip.compress(raw) + self._gzip.flush(zlib.Z_SYNC_FLUSH)
        data = f"{len(raw):x}\r\n".encode() + raw + b"\r\n"
        if self.s.burst:
            self._held = getattr(self, "_held", b"") + data
            return
        self.wfile.write(data)
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        fault = self.s.fault
        self._events += 1
        if fault and self._events > self.s.fault_after:
            if fault == "sigill":  # the whole process, as a build for another CPU dies
                import os  # (launched fakes only: in-process, it would kill the tests)
                import signal

                os.kill(os.getpid(), signal.SIGILL)
            if fault == "die":
                self.wfile.flush()
                self.connection.shutdown(2)
                raise ConnectionAbortedError
            if fault == "stall":
                time.sleep(30)
            if fault == "truncate":
                self._write(b'data: {"choices": [{"te')
                self.wfile.write(b"0\r\n\r\n")
                raise ConnectionAbortedError
            if fault == "streamerror":  # vLLM's error event, then the end of the stream
                self._write(b'data: {"error": {"object": "error", "message": "CUDA out of memory. '
                            b'Tried to allocate 2.00 GiB", "type": "InternalServerError", '
                            b'"code": 500}}\n\n')
                self._end_sse()
                raise ConnectionAbortedError
            if fault == "badjson":
                self._write(b"data: {not json}\n\n")
                self._end_sse()
                raise ConnectionAbortedError
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._write(f"data: {payload}\n\n".encode())

    def _end_sse(self) -> None:
        if getattr(self, "_gzip", None):
            tail = self._gzip.flush()
            self._held = getattr(self, "_held", b"") + f"{len(tail):x}\r\n".encode() + tail + b"\r\n"
        self.wfile.write(getattr(self, "_held", b"") + b"0\r\n\r\n")
        self._held = b""
        self.wfile.flush()

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(length) or b"{}")

    def _schedule(self) -> list[int]:
        """Tokens per emission: the prefill token, then one entry per verify step."""
        time.sleep(self.s.ttft_s)
        return [1, *self.s.steps]

    def _emissions(self) -> list[int]:
        """Tokens per event under the stream interval, 0 for a step that sends nothing (vLLM's
        output processor: the first token, then every N gathered, then what is left)."""
        sched = self._schedule()
        n = self.s.stream_interval
        if n <= 1:
            return sched
        out, held = [], 0
        for i, k in enumerate(sched):
            held += k
            if i == 0 or held >= n or i == len(sched) - 1:
                out.append(held)
                held = 0
            else:
                out.append(0)
        return out

    def _refused(self) -> bool:
        """Answer 401 where the key is wanted and missing or wrong (as vLLM's --api-key does)."""
        key = self.s.api_key
        if key is None or not (self.s.auth_all or self.path.startswith("/v1")):
            return False
        if self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._json({"error": "Unauthorized"}, 401)
        return True

    def _ready(self) -> bool:
        return time.monotonic() - self.server_ref.started >= self.s.ready_after_s

    # -- routes ------------------------------------------------------------------------
    def do_GET(self) -> None:
        fam = self.server_ref.family
        path = self.path
        if self._refused():
            return
        if not self._ready() and fam == "llamacpp":
            self._json({"error": {"code": 503, "message": "Loading model",
                                  "type": "unavailable_error"}}, 503)
            return
        if path in ("/health", "/health_generate", "/ready", "/v1/health"):
            self._json({"status": "ok"} if self._ready() else {"error": "starting"},
                       200 if self._ready() else 503)
        elif path == "/v1/models":
            self._json({"object": "list", "data": [{"id": self.s.model, "object": "model"}]})
        elif path == "/metrics":
            self._metrics()
        elif fam == "llamacpp" and path == "/props":
            self._json({"default_generation_settings": {"params": {}}, "build_info": "b9999-fake",
                        "model_path": f"/models/{self.s.model}.gguf"})
        elif fam == "sglang" and path == "/server_info":
            self._json({"version": "0.5.23", "tp_size": 1, "speculative_algorithm": "EAGLE3",
                        "speculative_num_steps": 3, "internal_states": [{}],
                        **self.s.server_info})
        elif fam == "vllm" and path.split("?")[0] == "/server_info" and self.s.vllm_config:
            as_json = "config_format=json" in path and not self.s.text_config
            config = self.s.vllm_config if as_json else vllm_config_text(self.s.vllm_config)
            self._json({"vllm_config": config, "vllm_env": {"VLLM_SERVER_DEV_MODE": "1"},
                        "system_env": {}})
        elif fam in ("vllm", "trtllm") and path == "/version":
            self._json({"version": "0.34.0" if fam == "vllm" else "1.2.0"})
        elif fam == "tgi" and path == "/info":
            self._json({"model_id": self.s.model, "max_total_tokens": 4096, "version": "3.3.6"})
        else:
            self._json({"error": "not found"}, 404)

    def _metrics(self) -> None:
        fam = self.server_ref.family
        c = self.server_ref.counters
        if self.s.fault == "nometrics":
            self._json({"error": {"message": "metrics are disabled", "code": 501}}, 501)
            return
        if fam == "trtllm":
            with c.lock:
                queue, c.iterations = c.iterations, []
            self._json(queue)
            return
        if fam == "llamacpp":
            lines = [
                "# HELP llamacpp:spec_decode_num_drafts_total Total speculative decoding verification steps",
                "# TYPE llamacpp:spec_decode_num_drafts_total counter",
                f"llamacpp:spec_decode_num_drafts_total {c.get('drafts'):g}",
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
                f"llamacpp:spec_decode_num_accepted_tokens_total {c.get('accepted'):g}",
            ]
        elif fam == "vllm":
            lab = f'model_name="{self.s.model}",engine="0"'
            lines = [
                "# TYPE vllm:spec_decode_num_drafts counter",
                f"vllm:spec_decode_num_drafts_total{{{lab}}} {c.get('drafts'):g}",
                "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {c.get('accepted'):g}",
                "# TYPE vllm:generation_tokens counter",
                f"vllm:generation_tokens_total{{{lab}}} {c.get('generated'):g}",
                "# TYPE vllm:request_decode_time_seconds histogram",
                f'vllm:request_decode_time_seconds_bucket{{{lab},le="+Inf"}} {c.get("requests"):g}',
                f"vllm:request_decode_time_seconds_sum{{{lab}}} {c.get('decode_s'):.6f}",
                f"vllm:request_decode_time_seconds_count{{{lab}}} {c.get('requests'):g}",
            ]
        elif fam == "sglang":
            lab = f'model_name="{self.s.model}",engine_type="unified"'
            lines = [
                "# TYPE sglang:generation_tokens counter",
                f'sglang:generation_tokens_total{{{lab},is_streaming="true"}} {c.get("generated"):g}',
                f'sglang:generation_tokens_total{{{lab},is_streaming="false"}} 0',
                "# TYPE sglang:spec_verify_calls counter",
                f"sglang:spec_verify_calls_total{{{lab}}} {c.get('verify'):g}",
            ]
        else:  # tgi
            lines = [
                "# TYPE tgi_request_skipped_tokens histogram",
                f'tgi_request_skipped_tokens_bucket{{le="+Inf"}} {c.get("skip_count"):g}',
                f"tgi_request_skipped_tokens_sum {c.get('skip_sum'):g}",
                f"tgi_request_skipped_tokens_count {c.get('skip_count'):g}",
            ]
        self._text("\n".join(lines) + "\n")

    def _openai_whole(self, body: dict[str, Any]) -> None:
        """A request answered whole (``stream`` false), as an earlier turn is replayed."""
        n = int(body.get("max_tokens") or 16)
        text = " ".join(["tok"] * n)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"}
                                  if self.path.endswith("chat/completions")
                                  else {"index": 0, "text": text, "finish_reason": "length"})
        self._json({"id": "whole", "object": "chat.completion", "choices": [choice],
                    "usage": {"prompt_tokens": 8, "completion_tokens": n,
                              "total_tokens": 8 + n}})

    def do_POST(self) -> None:
        body = self._body()
        self.server_ref.requests.append({"path": self.path, "body": body,
                                         "headers": dict(self.headers.items())})
        if self.s.request_log:  # one line per request, whichever process serves it
            with open(self.s.request_log, "a", encoding="utf-8") as log:
                log.write(f"{self.s.request_tag} {self.path}\n")
        if self._refused():
            return
        if self.server_ref.family == "vllm" and \
                self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            self._json({"error": {"message": "1 validation error:\n  Unsupported Media Type: "
                                  "Only 'application/json' is allowed", "type": "Bad Request",
                                  "param": None, "code": 400}}, 400)  # as vLLM's FastAPI does
            return
        if self._gateway_fault():
            return
        if self.s.fault == "http500":  # the cause in the server's log, as vLLM's engine core
            print("(EngineCore pid=1) ERROR 12-06 12:51:53 [core.py:1512] RuntimeError: CUDA "
                  "error: out of memory", file=sys.stderr, flush=True)
            self._json({"error": {"message": "EngineCore encountered an issue. See stack trace "
                                  "(above) for the root cause.", "code": 500}}, 500)
            return
        if self.s.fault == "http400":  # a careless server that echoes the credentials back
            auth = self.headers.get("Authorization", "")
            self._json({"error": {"message": f"The model `{body.get('model')}` does not exist "
                                             f"(request auth: {auth})", "code": 400}}, 400)
            return
        fam = self.server_ref.family
        try:
            if fam == "trtllm":
                allowed = {"model", "prompt", "messages", "max_tokens", "temperature", "seed",
                           "ignore_eos", "min_tokens", "stream", "stream_options", "detokenize",
                           "logprobs"}
                extra = sorted(set(body) - allowed)
                if extra:
                    self._json({"detail": [{"type": "extra_forbidden", "loc": ["body", extra[0]],
                                            "msg": "Extra inputs are not permitted"}]}, 400)
                    return
            route = {("llamacpp", "/completion"): self._llamacpp,
                     ("sglang", "/generate"): self._sglang_native,
                     ("tgi", "/generate_stream"): self._tgi}.get((fam, self.path))
            if route is None and self.path in ("/v1/completions", "/v1/chat/completions"):
                route = self._openai if body.get("stream", False) else self._openai_whole
            if route is None:
                self._json({"error": "not found"}, 404)
                return
            slots = self.server_ref.slots
            if slots is not None:
                slots.acquire()  # queued until a slot is free: the wait shows as TTFT
            self.server_ref.enter()
            try:
                route(body)
            finally:
                self.server_ref.leave()
                if slots is not None:
                    slots.release()
        except (ConnectionAbortedError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _gateway_fault(self) -> bool:
        """What a gateway in front of the server answers instead of the stream."""
        fault = self.s.fault
        if fault == "redirect":
            self.send_response(307)
            self.send_header("Location", "https://gateway.example/v1/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif fault == "ratelimit":
            body = b'{"error": "rate limit exceeded"}'
            self.send_response(429)
            self.send_header("Retry-After", "30")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif fault == "json200":  # a gateway that dropped stream=true
            self._json({"id": "cmpl-1", "choices": [{"index": 0, "text": "y" * 41}],
                        "usage": {"prompt_tokens": 12, "completion_tokens": 41}})
        elif fault == "html200":  # a single-sign-on proxy's login page
            body = b"<html><head><title>Sign in - Corporate SSO</title></head><body></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            return False
        return True

    # -- families ----------------------------------------------------------------------
    def _count(self) -> None:
        c = self.server_ref.counters
        steps = self.s.steps
        c.add("drafts", len(steps))
        c.add("accepted", sum(n - 1 for n in steps))
        c.add("generated", self.s.completion_tokens)
        c.add("verify", len(steps))
        c.add("skip_sum", sum(n - 1 for n in steps))
        c.add("skip_count", len(steps) + 1)  # the prefill step records 0
        with c.lock:
            c.iterations.extend({"iter": i, "specDecodingStats": {
                "numDraftTokens": 3, "numAcceptedTokens": n - 1, "numRequestsWithDraftTokens": 1,
                "acceptanceLength": float(n), "iterLatencyMS": self.s.step_s * 1e3,
                "draftOverhead": 0.1}} for i, n in enumerate(steps))

    def _llamacpp(self, body: dict[str, Any]) -> None:
        """One event per token; timings with draft counters on the final event."""
        step_s = self.s.request_step_s()
        self._start_sse()
        sent = 0
        start = time.perf_counter()
        prompt_n = len(str(body.get("prompt", "")).encode())
        for i, n in enumerate(self._schedule()):
            if i == 1:
                start = time.perf_counter()
            if i:
                time.sleep(step_s)
            for _ in range(n):
                sent += 1
                self._event({"index": 0, "content": "a", "tokens": [100 + sent % 50],
                             "stop": False, "id_slot": -1, "tokens_predicted": sent})
        predicted_ms = (time.perf_counter() - start) * 1e3
        n = self.s.completion_tokens
        self._count()
        self._event({"index": 0, "content": "", "tokens": [], "stop": True,
                     "model": self.s.model, "tokens_predicted": n, "stop_type": "limit",
                     "timings": {"cache_n": 0, "prompt_n": prompt_n, "prompt_ms": 10.0,
                                 "predicted_n": n, "predicted_ms": predicted_ms,
                                 "predicted_per_second": 1e3 * (n - 1) / predicted_ms,
                                 **self.s.draft_fields()}})
        self._end_sse()

    def _sglang_native(self, body: dict[str, Any]) -> None:
        """Cumulative text and completion_tokens on every chunk; spec fields on the last one."""
        step_s = self.s.request_step_s()
        self._start_sse()
        total = 0
        sched = self._emissions()
        for i, n in enumerate(sched):
            if i:
                time.sleep(step_s)
            if not n:
                continue
            total += n
            meta: dict[str, Any] = {"id": "r1", "prompt_tokens": 12, "completion_tokens": total,
                                    "finish_reason": None}
            if i == len(sched) - 1:
                verify = len(self.s.steps)
                meta.update({"finish_reason": {"type": "length", "length": total},
                             "spec_verify_ct": verify,
                             "spec_accept_length": total / verify,
                             "spec_num_correct_drafts": sum(k - 1 for k in self.s.steps),
                             "e2e_latency": 0.05})
            self._event({"text": "x" * total, "output_ids": list(range(total)), "meta_info": meta})
        self._count()
        self._event("[DONE]")
        self._end_sse()

    def _openai(self, body: dict[str, Any]) -> None:
        fam = self.server_ref.family
        if body.get("model") and body["model"] != self.s.model:
            self._json({"error": {"message": f"The model `{body['model']}` does not exist.",
                                  "type": "NotFoundError", "code": 404}}, 404)
            return
        chat = self.path.endswith("chat/completions")
        step_s = self.s.request_step_s()
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        self._start_sse()
        total = 0
        decoded_iters = 0
        per_token = fam == "llamacpp"  # llama-server sends one event per token on every route
        start = time.perf_counter()
        for i, k in enumerate(self._schedule() if per_token else self._emissions()):
            if i:
                time.sleep(step_s)
                decoded_iters += 1
            else:
                start = time.perf_counter()
            for n in [1] * k if per_token else [k] if k else []:
                total += n
                self._oai_chunk(body, chat, continuous, n, total, decoded_iters)
        self.server_ref.counters.add("decode_s", time.perf_counter() - start)
        self.server_ref.counters.add("requests", 1)
        self._count()
        if fam == "sglang" and body.get("return_spec_tokens_details"):
            self._event({"id": "cmpl-1", "choices": [], "sglext": {"spec_tokens_details": {
                "spec_verify_ct": len(self.s.steps), "spec_accept_length": total / len(self.s.steps)}}})
        if opts.get("include_usage", fam == "trtllm" and "stream_options" in body):
            final: dict[str, Any] = {"id": "cmpl-1", "choices": [], "model": self.s.model,
                                     "usage": {"prompt_tokens": 12, "completion_tokens": total,
                                               "total_tokens": 12 + total}}
            if fam == "vllm" and self.s.per_request_metrics:
                steps = len(self.s.steps)
                acc = sum(k - 1 for k in self.s.steps)
                k = self.s.num_spec_tokens
                histogram = [0] * (k + 1)  # steps by accepted drafts, as vLLM's summary level
                for n in self.s.steps:
                    histogram[min(k, n - 1)] += 1
                final["metrics"] = {"speculative_decoding": {
                    "mean_acceptance_length": 1 + acc / steps,
                    "draft_acceptance_rate": acc / (k * steps), "num_spec_steps": steps,
                    "num_accepted_draft_tokens": acc, "num_draft_tokens": k * steps,
                    "acceptance_histogram": histogram, "num_spec_tokens": k}}
            if fam == "llamacpp":
                ms = (time.perf_counter() - start) * 1e3
                final["timings"] = {"prompt_n": 12, "predicted_n": total, "predicted_ms": ms,
                                    "predicted_per_second": 1e3 * (total - 1) / ms,
                                    **self.s.draft_fields()}
            self._event(final)
        self._event("[DONE]")
        self._end_sse()

    def _oai_chunk(self, body: dict[str, Any], chat: bool, continuous: bool, n: int, total: int,
               decoded_iters: int) -> None:
        fam = self.server_ref.family
        choice: dict[str, Any] = {"index": 0, "finish_reason": None}
        if chat:
            choice["delta"] = {"content": "y" * n}
        else:
            choice["text"] = "y" * n
        if fam == "vllm" and body.get("return_token_ids"):
            choice["token_ids"] = list(range(n))
        if fam == "trtllm":
            if body.get("detokenize") is False:
                choice["token_ids"] = list(range(n))
            if decoded_iters:
                choice["avg_decoded_tokens_per_iter"] = (total - 1) / decoded_iters
        chunk: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion",
                                 "model": self.s.model, "choices": [choice]}
        if continuous:
            chunk["usage"] = {"prompt_tokens": 12, "completion_tokens": total,
                              "total_tokens": 12 + total}
        self._event(chunk)

    def _tgi(self, body: dict[str, Any]) -> None:
        """One event per token; details on the last; no [DONE]."""
        step_s = self.s.request_step_s()
        self._start_sse()
        sent = 0
        sched = self._schedule()
        total = self.s.completion_tokens
        for i, n in enumerate(sched):
            if i:
                time.sleep(step_s)
            for _ in range(n):
                sent += 1
                last = sent == total
                self._event({"index": sent, "token": {"id": 100 + sent % 50, "text": "z",
                                                      "logprob": -0.1, "special": False},
                             "generated_text": "z" * total if last else None,
                             "details": {"finish_reason": "length", "generated_tokens": total,
                                         "seed": None} if last else None})
        self._count()
        self._end_sse()


def main() -> None:
    """``python -m tests.servers.fake --family vllm --port 8000 [--launches FILE]``."""
    import argparse
    import os
    import signal

    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="vllm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--launches", help="append this process's pid to FILE")
    parser.add_argument("--request-log", help="append a line per completion request to FILE: "
                                              "'spec PATH' or 'plain PATH'")
    parser.add_argument("--fault")
    parser.add_argument("--model", default="test-model")
    parser.add_argument("--step-s", type=float, default=0.004)
    parser.add_argument("--ready-after-s", type=float, default=0.0)
    parser.add_argument("--stream-interval", type=int, default=1)
    parser.add_argument("--child", action="store_true", help="also start a child process")
    parser.add_argument("--plain-unless-speculative", action="store_true",
                        help="decode one token per step (speculation off) unless "
                             "--speculative-config is given")
    parser.add_argument("--speculative-config", help="vLLM's: JSON; num_speculative_tokens K "
                        "drafts accepted whole (K + 1 tokens per step)")
    parser.add_argument("--per-request-spec-decode-metrics", default="summary",
                        choices=("none", "summary", "detailed"),
                        help="vLLM's (its default is none; the fake's summary)")
    args, _ = parser.parse_known_args()
    if args.launches:
        with open(args.launches, "a") as f:
            f.write(f"{os.getpid()}\n")
    if args.child:
        import subprocess
        import sys

        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    script = Script(fault=args.fault, model=args.model, step_s=args.step_s,
                    ready_after_s=args.ready_after_s, stream_interval=args.stream_interval,
                    request_log=args.request_log,
                    request_tag="spec" if args.speculative_config else "plain")
    if args.speculative_config:
        k = int(json.loads(args.speculative_config).get("num_speculative_tokens", 3))
        script = replace(script, steps=[k + 1] * (40 // (k + 1)), num_spec_tokens=k,
                         per_request_metrics=args.per_request_spec_decode_metrics != "none")
    elif args.plain_unless_speculative:  # one token a step, a step a little cheaper than a verify
        script = replace(script, steps=[1] * 40, step_s=args.step_s * 0.8,
                         per_request_metrics=False)
    server = FakeServer(args.family, script)
    server.httpd.server_close()
    server.httpd = ThreadingHTTPServer((args.host, args.port), server.httpd.RequestHandlerClass)
    server.httpd.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(SystemExit(0)))
    print(f"fake {args.family} server listening on {args.host}:{args.port}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
