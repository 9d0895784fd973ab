"""Reads the price table files: the packaged `steward/data/prices.json`, merged with a
deployment's own file (`STEWARD_PRICE_TABLE`; see `steward.domain.prices` for the rules)."""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

from steward.domain.prices import PriceTable, parse_price_table


def load_price_table(path: str | None = None) -> PriceTable:
    """The packaged table, extended or overridden by the file at `path` (STEWARD_PRICE_TABLE).

    The merged version is `"<packaged>+<override>"`. A bad override file raises ValueError
    naming the file and the offending field. Results are cached by (path, mtime, size), so
    an edited file is picked up by the next call.
    """
    packaged = _packaged_table()
    raw_path = (path or "").strip()
    if not raw_path:
        return packaged
    try:
        stat = Path(raw_path).stat()
    except OSError as exc:
        raise ValueError(
            f"price table {raw_path}: cannot read ({exc.strerror or type(exc).__name__})"
        ) from None
    return _merged_table(raw_path, stat.st_mtime_ns, stat.st_size)


@cache
def _packaged_table() -> PriceTable:
    source = resources.files("steward").joinpath("data/prices.json")
    return parse_price_table(source.read_text(encoding="utf-8"), where="steward/data/prices.json")


@lru_cache(maxsize=8)
def _merged_table(path: str, mtime_ns: int, size: int) -> PriceTable:
    """Cached by the file's identity so that an edit is never served stale."""
    del mtime_ns, size  # part of the cache key only
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"price table {path}: cannot read ({type(exc).__name__})") from None
    override = parse_price_table(text, where=path)
    base = _packaged_table()
    return PriceTable(version=f"{base.version}+{override.version}", models={**base.models, **override.models})
