"""Counts in words for messages: '1 request', '2 requests', '1,024 configs'."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``noun`` in the number it takes
    (``plural``, default ``noun + "s"``, for every n but 1)."""
    word = noun if n == 1 else (plural or noun + "s")
    return f"{n:,} {word}"
