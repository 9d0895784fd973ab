"""Task Documents for tests."""

from __future__ import annotations

DOCUMENT_REPO = "octo/demo"  # the repository of `document`s unless told


def document(
    *items: str, repo: str = DOCUMENT_REPO, checks: tuple[str, ...] = ("pytest -q",), title: str = "Demo"
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


def largest_document(items: int = 100, limit: int = 256 * 1024) -> str:
    """A document of `items` checkboxes at exactly `limit` UTF-8 bytes (no tabs), its front
    matter near its own 16 KiB limit (20 long checks), titles of 200 characters and the rest
    details."""
    checks = tuple(f"pytest -q tests/test_{n:02d}.py " + "-k x " * 150 for n in range(20))
    head = document("x", checks=checks).split("- [ ] x")[0]
    per_item, extra = divmod(limit - len(head.encode()), items)
    parts = []
    for n in range(items):
        title = f"Item {n} " + "t" * (200 - len(f"Item {n} "))
        size = per_item + (extra if n == items - 1 else 0)
        body = "d" * (size - len(f"- [ ] {title}\n  \n".encode()))
        parts.append(f"- [ ] {title}\n  {body}\n")
    return head + "".join(parts)
