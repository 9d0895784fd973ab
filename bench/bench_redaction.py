"""Redaction throughput on ordinary text and on text built to make its patterns backtrack.

Prints seconds per input and MB/s; `python bench/bench_redaction.py`.
"""

from __future__ import annotations

import time

from steward.domain.redaction import Redactor

ADVERSARIAL = {
    "eyJ x20000": "eyJ" * 20000,
    "ghs_ runs": ("ghs_" * 2000 + "!x") * 8,
    "authorization: x4000": "authorization:" * 4000,
    "aws_session_token= x3000": "aws_session_token=" * 3000,
    "Bearer x8000": "Bearer " * 8000 + "abc",
    ":// x20000": "://" * 20000,
}
ORDINARY = ("diff --git a/x.py b/x.py\n+def f(a: int) -> int:\n+    return a + 1\n" * 4000, "diff-like text")


def main() -> None:
    redactor = Redactor(["a-secret-value-of-the-process"])
    for name, text in [*ADVERSARIAL.items(), (ORDINARY[1], ORDINARY[0])]:
        started = time.perf_counter()
        redactor.redact(text)
        elapsed = time.perf_counter() - started
        print(f"{name:28} {len(text) / 1e6:6.2f} MB  {elapsed:6.3f} s  {len(text) / 1e6 / elapsed:8.1f} MB/s")


if __name__ == "__main__":
    main()
