"""Property tests: however the bytes of a stream are split into reads, the events are the same."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specbound.serving.transport import StreamResult, _split_events

EVENTS = st.lists(st.dictionaries(st.sampled_from(["text", "id", "n"]),
                                  st.one_of(st.integers(), st.text(max_size=8)), max_size=3),
                  min_size=1, max_size=12)


def encode(events: list[dict], crlf: bool) -> bytes:
    sep = b"\r\n" if crlf else b"\n"
    body = b"".join(b"data: " + json.dumps(e).encode() + sep + sep for e in events)
    return body + b"data: [DONE]" + sep + sep


@settings(max_examples=200, deadline=None)
@given(EVENTS, st.lists(st.integers(min_value=1, max_value=40), max_size=30), st.booleans())
def test_any_split_gives_the_same_events_stamped_by_the_completing_read(events, cuts, crlf):
    raw = encode(events, crlf)
    pieces, pos = [], 0
    for n in cuts:
        if pos >= len(raw):
            break
        pieces.append(raw[pos:pos + n])
        pos += n
    if pos < len(raw):
        pieces.append(raw[pos:])
    reads = [(float(i), i, piece) for i, piece in enumerate(pieces, start=1)]
    result = StreamResult(sent_at=0.0)
    _split_events(reads, result)
    assert [obj for _, obj in result.events] == events and result.done
    ends, seen = [], 0
    for i, piece in enumerate(pieces, start=1):  # the read in which each event's end arrived
        text = raw[:seen + len(piece)].replace(b"\r\n", b"\n")
        ends += [i] * (text.count(b"\n\n") - len(ends))
        seen += len(piece)
    assert result.read_of_event == ends[:len(events)]
    assert [t for t, _ in result.events] == [float(i) for i in ends[:len(events)]]
