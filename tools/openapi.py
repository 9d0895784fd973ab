"""Write the client API's OpenAPI document to docs/openapi.json (generated from the routes).

    .venv/bin/python tools/openapi.py          # regenerate
    .venv/bin/python tools/openapi.py --check  # exit 1 when the committed one is stale

The document is generated from `steward.api.app:create_app` (Powertools' OpenAPI support and
`steward.api.openapi`); no AWS is reached: the app connects only when a request is served.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "steward" / "python"))

from steward.api.app import create_app  # noqa: E402 - after the layer is on the path
from steward.api.openapi import document_text  # noqa: E402

DOCUMENT = ROOT / "docs" / "openapi.json"
COMMAND = ".venv/bin/python tools/openapi.py"


def current() -> str:
    def no_services() -> object:
        raise RuntimeError("generating the document serves no request")

    return document_text(create_app(no_services))  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    text = current()
    if "--check" in argv:
        if not DOCUMENT.exists() or DOCUMENT.read_text(encoding="utf-8") != text:
            print(f"{DOCUMENT.relative_to(ROOT)} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.parent.mkdir(parents=True, exist_ok=True)
    DOCUMENT.write_text(text, encoding="utf-8")
    print(f"wrote {DOCUMENT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
