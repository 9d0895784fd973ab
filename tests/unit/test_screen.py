"""The screen: command output redacted as it streams, live to a sink, and a bounded tail."""

from __future__ import annotations

from steward.domain.redaction import Redactor
from steward.runner.screen import MAX_BYTES, MAX_LINES, Screen

TOKEN = "ghs_" + "Q" * 36


def test_the_tail_keeps_the_last_200_lines() -> None:
    screen = Screen(Redactor())
    for n in range(1, 501):
        screen.write(f"line {n}\n".encode())
    lines = screen.tail().splitlines()
    assert len(lines) == MAX_LINES
    assert (lines[0], lines[-1]) == ("line 301", "line 500")


def test_the_tail_is_at_most_64_kib() -> None:
    screen = Screen(Redactor())
    screen.write(b"x" * (3 * MAX_BYTES) + b"\nend")
    tail = screen.tail()
    assert len(tail.encode()) <= MAX_BYTES
    assert tail.endswith("end")


def test_a_token_split_across_writes_never_reaches_the_sink_or_the_tail() -> None:
    live: list[str] = []
    screen = Screen(Redactor(["a-held-secret"]), live.append)
    for chunk in (f"token: {TOKEN[:10]}", f"{TOKEN[10:]} and a-held", "-secret done\n"):
        screen.write(chunk.encode())
    tail = screen.tail()
    seen = "".join(live)
    for text in (seen, tail):
        assert "QQQQQQQQ" not in text
        assert "a-held-secret" not in text
        assert "done" in text


def test_utf8_split_across_writes_is_decoded_whole() -> None:
    screen = Screen(Redactor())
    data = "ünïcode ✓\n".encode()
    for byte in data:
        screen.write(bytes([byte]))
    assert screen.tail() == "ünïcode ✓"
