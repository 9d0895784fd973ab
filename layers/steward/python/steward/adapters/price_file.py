"""Reads the price table: the packaged `steward/data/prices.json`, merged with a deployment's
own table (`STEWARD_PRICE_TABLE`; see `steward.domain.prices` for the rules): the path of a
JSON file, or the JSON itself (a value starting with `{`, as the CDK app passes its
`priceTable` context to the functions, which have no file of their own to read)."""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

from steward.domain.prices import PriceTable, parse_price_table

PRICE_TABLE_ENV = "STEWARD_PRICE_TABLE"


def load_price_table(path: str | None = None) -> PriceTable:
    """The packaged table, extended or overridden by `path` (STEWARD_PRICE_TABLE's value: a
    file's path, or the table's JSON itself when it starts with `{`).

    The merged version is `"<packaged>+<override>"`. A bad override raises ValueError naming
    STEWARD_PRICE_TABLE (and the file) and the offending field. Results are cached by (path,
    mtime, size), so an edited file is picked up by the next call, and by the JSON's text.
    """
    packaged = _packaged_table()
    raw_path = (path or "").strip()
    if not raw_path:
        return packaged
    if raw_path.startswith("{"):
        return _inline_table(raw_path)
    try:
        stat = Path(raw_path).stat()
    except OSError as exc:
        raise ValueError(
            f"price table {PRICE_TABLE_ENV} file {raw_path}: cannot read ({exc.strerror or type(exc).__name__})"
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
        raise ValueError(
            f"price table {PRICE_TABLE_ENV} file {path}: cannot read ({type(exc).__name__})"
        ) from None
    return _merged(parse_price_table(text, where=f"{PRICE_TABLE_ENV} file {path}"))


@lru_cache(maxsize=8)
def _inline_table(text: str) -> PriceTable:
    return _merged(parse_price_table(text, where=f"{PRICE_TABLE_ENV} (inline JSON)"))


def _merged(override: PriceTable) -> PriceTable:
    base = _packaged_table()
    return PriceTable(version=f"{base.version}+{override.version}", models={**base.models, **override.models})
