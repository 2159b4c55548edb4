"""Counts in words for messages: '1 request', '2 requests', '1,024 configs'."""

from __future__ import annotations


def noun(n: int, word: str, plural: str | None = None) -> str:
    """``word`` in the number ``n`` takes (``plural``, default ``word + "s"``,
    for every n but 1)."""
    return word if n == 1 else (plural or word + "s")


def count(n: int, word: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``word`` in its number (``noun``)."""
    return f"{n:,} {noun(n, word, plural)}"
