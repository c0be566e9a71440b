"""Property tests: however the bytes of a stream are split into reads, the events are the same,
whichever decoding path (single-line data events, or anything else) the stream takes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.sse import _decode_fast, _normalised, split_events
from pytest_specbound.serving.stream_result import StreamResult

OBJECTS = st.dictionaries(st.sampled_from(["text", "id", "n"]),
                          st.one_of(st.integers(), st.text(max_size=8)), max_size=3)
# an event is (what it decodes to or None for no event, its lines)
PLAIN = OBJECTS.map(lambda o: (o, [b"data: " + json.dumps(o).encode()]))
NO_SPACE = OBJECTS.map(lambda o: (o, [b"data:" + json.dumps(o).encode()]))
MULTI_LINE = OBJECTS.map(lambda o: (o, [b"data: " + json.dumps(o, indent=1).encode()
                                        .replace(b"\n", b"\ndata: ")]))
NAMED = OBJECTS.map(lambda o: (o, [b"event: message", b"data: " + json.dumps(o).encode()]))
COMMENT = st.just((None, [b": keep-alive"]))


def encode(events: list[tuple[dict | None, list[bytes]]], crlf: bool, done: bool) -> bytes:
    sep = b"\r\n" if crlf else b"\n"
    body = b"".join(sep.join(lines) + sep + sep for _, lines in events)
    return body + (b"data: [DONE]" + sep + sep if done else b"")


def cut(raw: bytes, sizes: list[int]) -> list[bytes]:
    pieces, pos = [], 0
    for n in sizes:
        if pos >= len(raw):
            break
        pieces.append(raw[pos:pos + n])
        pos += n
    return pieces + ([raw[pos:]] if pos < len(raw) else [])


def check(events: list[tuple[dict | None, list[bytes]]], sizes: list[int], crlf: bool,
          done: bool, fast: bool = False) -> None:
    raw = encode(events, crlf, done)
    pieces = cut(raw, sizes)
    reads = [(float(i), i, piece) for i, piece in enumerate(pieces, start=1)]
    result = StreamResult(sent_at=0.0)
    if fast:  # the C-level path alone must take these streams, not fall back
        stream, bounds = _normalised(reads)
        assert _decode_fast(stream, bounds, reads, result)
    else:
        split_events(reads, result)
    expected = [obj for obj, _ in events if obj is not None]
    assert [obj for _, obj in result.events] == expected
    assert result.done is done
    ends, seen = [], 0
    for i, piece in enumerate(pieces, start=1):  # the read in which each event's end arrived
        text = raw[:seen + len(piece)].replace(b"\r\n", b"\n")
        ends += [i] * (text.count(b"\n\n") - len(ends))
        seen += len(piece)
    data_ends = [end for end, (obj, _) in zip(ends[:len(events)], events, strict=True) if obj is not None]
    assert result.read_of_event == data_ends
    assert [t for t, _ in result.events] == [float(i) for i in data_ends]


SIZES = st.lists(st.integers(min_value=1, max_value=40), max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(PLAIN, NO_SPACE), min_size=1, max_size=12), SIZES, st.booleans(),
       st.booleans())
def test_single_line_events_any_split(events, sizes, crlf, done):
    check(events, sizes, crlf, done)
    check(events, sizes, crlf, done, fast=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(PLAIN, MULTI_LINE, NAMED, COMMENT), min_size=1, max_size=12), SIZES,
       st.booleans(), st.booleans())
def test_any_event_shapes_any_split(events, sizes, crlf, done):
    check(events, sizes, crlf, done)


@pytest.mark.parametrize("stream, message", [
    (b'data: {"a": 1}\n\ndata: {"a": \n\n', "malformed JSON in event 2"),
    (b'data: {"a": 1}\n\ndata: 1, 2\n\n', "malformed JSON in event 2"),
    (b'data: {"error": {"message": "out of memory"}}\n\n', "server error in stream: out of memory"),
    (b'data: {"a": 1}\n\ndata: {"a": 2', "truncated stream: 1 events"),
])
def test_bad_streams_name_the_event(stream, message):
    with pytest.raises(RequestError, match=message):
        split_events([(1.0, 1, stream)], StreamResult(sent_at=0.0))


def test_done_in_the_middle_keeps_later_events():
    result = StreamResult(sent_at=0.0)
    split_events([(1.0, 1, b'data: [DONE]\n\ndata: {"a": 1}\n\n')], result)
    assert result.done and [obj for _, obj in result.events] == [{"a": 1}]
