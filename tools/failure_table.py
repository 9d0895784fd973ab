"""Write the README's failure table from `steward.domain.failures` (`--check`: only say
whether it is current). The table lives between the `failure-table` markers."""

from __future__ import annotations

import sys
from pathlib import Path

from steward.domain.failures import documented_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- failure-table:start -->\n", "<!-- failure-table:end -->"


def table() -> str:
    rows = ["| code | who must act | what to do |", "| --- | --- | --- |"]
    rows += [
        f"| `{r['code']}` | {r['who']} | {r['remedy'].replace('|', chr(92) + '|')} |"
        for r in documented_table()
    ]
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    wanted = f"{head}{START}{table()}{END}{tail}"
    if wanted == text:
        return 0
    if "--check" in argv:
        print("README.md's failure table is not current: run python tools/failure_table.py", file=sys.stderr)
        return 1
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
