"""Redaction throughput on ordinary text and on text built to make its patterns backtrack.

Prints seconds per input and MB/s; `python bench/bench_redaction.py`. The `screen:` lines
time the relay's screen of one text (`issued_credential`) on the same inputs and two more.
"""

from __future__ import annotations

import base64
import random
import time

from steward.domain.redaction import Redactor, issued_credential

ADVERSARIAL = {
    "eyJ x20000": "eyJ" * 20000,
    "ghs_ runs": ("ghs_" * 2000 + "!x") * 8,
    "authorization: x4000": "authorization:" * 4000,
    "aws_session_token= x3000": "aws_session_token=" * 3000,
    "Bearer x8000": "Bearer " * 8000 + "abc",
    ":// x20000": "://" * 20000,
}
ORDINARY = ("diff --git a/x.py b/x.py\n+def f(a: int) -> int:\n+    return a + 1\n" * 4000, "diff-like text")


# What the relay screens on every call (`issued_credential`): the inputs above, and what makes
# it normalize (non-ASCII text) or decode (long base64 runs, as an image's bytes are).
SCREENED = {
    "non-ASCII prose": "naïve café — ½ ﬁle, 日本語 テキスト, emoji 👨\u200d👩\u200d👧\n" * 8000,
    "base64 image bytes": base64.b64encode(random.Random(0).randbytes(768_000)).decode(),
}


def _line(name: str, size: int, elapsed: float) -> str:
    return f"{name:28} {size / 1e6:6.2f} MB  {elapsed:6.3f} s  {size / 1e6 / elapsed:8.1f} MB/s"


def main() -> None:
    redactor = Redactor(["a-secret-value-of-the-process"])
    inputs = [*ADVERSARIAL.items(), (ORDINARY[1], ORDINARY[0])]
    for name, text in inputs:
        started = time.perf_counter()
        redactor.redact(text)
        print(_line(name, len(text), time.perf_counter() - started))
    for name, text in [*inputs, *SCREENED.items()]:
        started = time.perf_counter()
        issued_credential(text)
        print(_line(f"screen: {name}", len(text), time.perf_counter() - started))


if __name__ == "__main__":
    main()
