"""The shipped model catalog: small config.json-derived files in
``planner/data/models`` (only the fields sizing reads, plus the source URL and
the date recorded), read with ``planner.models.config_json``.

Each file: ``{"id": HF id, "aliases": [...], "family": ..., "source": URL,
"recorded": date, "note": optional, "config": {config.json fields}}``.
The entries were transcribed without access to the Hugging Face hub; the
parameter counts they give are checked against each model card in
``tests/test_model_config.py``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from planner.models.config_json import ModelSpec, from_config

CATALOG_DIR = Path(__file__).parents[1] / "data" / "models"


@cache
def entries() -> dict[str, dict]:
    """Catalog files by Hugging Face id (insertion order: file name)."""
    out = {}
    for p in sorted(CATALOG_DIR.glob("*.json")):
        e = json.loads(p.read_text())
        out[e["id"]] = e
    return out


@cache
def aliases() -> dict[str, str]:
    """Lower-cased id or alias -> id."""
    out = {}
    for mid, e in entries().items():
        out[mid.lower()] = mid
        for a in e.get("aliases", []):
            out[a.lower()] = mid
    return out


@cache
def spec(model_id: str) -> ModelSpec:
    """The catalog model's ModelSpec, named by its first alias (the preset name)
    if it has one, else its id."""
    e = entries()[model_id]
    cfg = {**e["config"], "_source": f"{e['source']} (recorded {e['recorded']})"}
    if e.get("note"):
        cfg["_note"] = e["note"]
    name = (e.get("aliases") or [model_id])[0]
    return from_config(cfg, name, f"catalog {model_id}")


def lookup(name: str) -> ModelSpec | None:
    """The catalog entry for an id or alias (case-insensitive), or None."""
    mid = aliases().get(name.lower())
    return None if mid is None else spec(mid)
