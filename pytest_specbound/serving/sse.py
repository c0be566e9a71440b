"""Server-sent events: split a timed byte stream into events, each stamped with its read.

Every server this measures sends one ``data:`` line per event; such a stream is decoded with a
handful of C-level passes. Anything else (comments, keep-alives, multi-line data, named events, a
payload that does not parse) goes through the event-by-event path. A gateway's compression of the
stream is undone here too, read by read, so each read keeps its arrival time.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.stream_result import StreamResult

# the request asks for identity; a gateway that compresses the stream anyway is undone here
DECODABLE = ("gzip", "x-gzip", "deflate")


def body_decoder(encoding: str | None, path: str) -> Callable[[bytes], bytes] | None:
    """A function that decompresses each read's bytes as they came (None: not compressed).

    A gzip or deflate stream is decoded read by read (a gateway flushes its compressor with each
    event, so each read still yields its own events); any other encoding is a one-line error.
    """
    name = (encoding or "identity").strip().lower()
    if name in ("", "identity"):
        return None
    if name not in DECODABLE:
        raise RequestError(
            f"POST {path}: the stream came compressed as {name!r} (Content-Encoding) though "
            f"identity was asked for; decodable: {', '.join(DECODABLE)}: turn compression off "
            "for text/event-stream at the gateway")
    decompressors: list[Any] = []  # made on the first read, which tells raw from zlib deflate

    def decode(data: bytes) -> bytes:
        if not decompressors:  # deflate is zlib-wrapped by the standard, raw by some servers
            raw_deflate = name == "deflate" and not (len(data) >= 2 and data[0] & 0x0F == 8
                                                     and (data[0] << 8 | data[1]) % 31 == 0)
            decompressors.append(zlib.decompressobj(-15 if raw_deflate else 47))
        try:
            return bytes(decompressors[0].decompress(data))
        except zlib.error as exc:
            raise RequestError(f"POST {path}: the {name}-compressed stream does not decode: "
                               f"{exc}") from None

    return decode


def split_events(reads: list[tuple[float, int, bytes]], result: StreamResult) -> None:
    """Split the stream into events, each stamped with the read that brought its end.

    Every server this measures sends one ``data:`` line per event; such a stream is decoded with a
    handful of C-level passes (count the event ends per read, one ``json.loads`` of all payloads as
    a JSON array), a microsecond or less per event. Anything else (comments, multi-line data, named
    events, a payload that does not parse) goes through the event-by-event path.
    """
    stream, bounds = _normalised(reads)
    cut = stream.rfind(b"\n\n") + 2  # complete events end here; what follows is unterminated
    body, tail = (stream[:cut], stream[cut:]) if cut >= 2 else (b"", stream)
    if not _one_data_line_each(body) or not _decode_fast(body, bounds, reads, result):
        _decode_each(body.split(b"\n\n")[:-1], bounds, reads, result)
    if tail.strip() and not result.done:
        raise RequestError(
            f"truncated stream: {len(result.events)} events, then an unterminated one "
            f"({tail[:80]!r})"
        )


def _normalised(reads: list[tuple[float, int, bytes]]) -> tuple[bytes, list[int]]:
    """The stream with CRLF as LF, and where each read ends in it."""
    pieces, bounds, total = [], [], 0
    held_cr = False  # a CRLF can be split across two reads: hold a trailing CR back
    for _arrived, _read_no, data in reads:
        if held_cr:
            data = b"\r" + data
        held_cr = data.endswith(b"\r")
        if held_cr:
            data = data[:-1]
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        pieces.append(data)
        total += len(data)
        bounds.append(total)
    return b"".join(pieces), bounds


def _one_data_line_each(body: bytes) -> bool:
    events = body.count(b"\n\n")
    return (events > 0 and body.startswith(b"data:") and body.count(b"\n") == 2 * events
            and body.count(b"\n\ndata:") == events - 1)


def _decode_fast(body: bytes, bounds: list[int], reads: list[tuple[float, int, bytes]],
                 result: StreamResult) -> bool:
    """Decode a stream of single-line data events; False where the event-by-event path must."""
    last = body.rfind(b"\n\ndata:", 0, len(body) - 2)
    last = last + 2 if last >= 0 else 0  # where the last event starts
    done = body[last + 5:-2].strip() == b"[DONE]"
    events = body[:last] if done else body
    if b"[DONE]" in events:
        return False  # [DONE] before the end, or inside a payload: let the slow path judge
    try:  # the payloads, comma-separated, as one JSON array
        objs = json.loads(b"[" + events[5:-2].replace(b"\n\ndata:", b",") + b"]") if events else []
    except ValueError:
        return False
    times: list[float] = []
    numbers: list[int] = []
    start, limit = 0, len(body)
    for (arrived, read_no, _data), bound in zip(reads, bounds, strict=True):
        hi = min(bound, limit)
        if hi > start:  # event ends whose second newline came with this read
            n = body.count(b"\n\n", max(start - 1, 0), hi)
            times += [arrived - result.sent_at] * n
            numbers += [read_no] * n
        start = bound
    if done:
        del times[-1], numbers[-1]
    if len(objs) != len(times):  # a payload that was two values, or none
        return False
    if b'"error"' in body:
        for obj in objs:
            _raise_on_error(obj)
    result.done = result.done or done
    result.events += zip(times, objs, strict=True)
    result.read_of_event += numbers
    return True


def _decode_each(parts: list[bytes], bounds: list[int], reads: list[tuple[float, int, bytes]],
                 result: StreamResult) -> None:
    end, j = -1, 0
    for index, raw in enumerate(parts, start=1):
        end += len(raw) + 2  # the offset of the blank line's second newline
        while bounds[j] <= end:
            j += 1
        payload = _payload(raw)
        if payload is None:
            continue
        if payload == b"[DONE]":
            result.done = True
            continue
        obj = _decode(payload, index)
        _raise_on_error(obj)
        result.events.append((reads[j][0] - result.sent_at, obj))
        result.read_of_event.append(reads[j][1])


def _raise_on_error(obj: Any) -> None:
    if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise RequestError(f"server error in stream: {str(msg)[:200]}")


def _payload(raw: bytes) -> bytes | None:
    """The data of one event (its ``data:`` lines joined), or None for comments and keep-alives."""
    lines = [ln[5:].strip() for ln in raw.split(b"\n") if ln.startswith(b"data:")]
    if not lines:
        if raw.startswith(b"error:") or b"\nerror:" in raw:
            raise RequestError(f"server sent an error event: {raw[:200].decode('utf-8', 'replace')}")
        return None
    return b"\n".join(lines)


def _decode(payload: bytes, index: int) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise RequestError(f"malformed JSON in event {index}: {exc} ({payload[:80]!r})") from None
