"""Task Documents for tests."""

from __future__ import annotations


def document(
    *items: str, repo: str = "octo/demo", checks: tuple[str, ...] = ("pytest -q",), title: str = "Demo"
) -> str:
    """A valid Task Document whose top-level checkboxes are `items` (each "[ ] text" or
    "[x] text", or plain text meaning unchecked; extra lines of an item are indented)."""
    lines = ["---", f"repo: {repo}", "checks:", *[f"  - {c}" for c in checks], "---", f"# {title}", ""]
    for item in items:
        head, *rest = item.split("\n")
        box = head[:3] if head[:3] in ("[ ]", "[x]") else "[ ]"
        text = head[3:].strip() if head[:3] in ("[ ]", "[x]") else head
        lines.append(f"- {box} {text}")
        lines.extend(f"  {line}" for line in rest)
    return "\n".join(lines) + "\n"


def numbered(count: int, prefix: str = "Item") -> list[str]:
    return [f"{prefix} {n}: change module {n}" for n in range(1, count + 1)]
