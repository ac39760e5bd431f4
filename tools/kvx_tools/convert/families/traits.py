"""The decoder families kvx runs, read from the engine's own table, engine/model/families.json (the engine
embeds the same file at build time, so the converter cannot write a family the engine does not know).

A family row names a norm kind, a positions kind and an MLP kind; config.json's "architecture" picks a row and
its optional "norm", "positions" and "mlp" fields override the row's choices. The converter names the row that
matches a graph's three kinds where there is one, else "llama" with the kinds that differ as overrides."""

import functools
import json
from pathlib import Path

from ..errors import ConvertError

BASE_ARCHITECTURE = "llama"
KIND_FIELDS = ("norm", "positions", "mlp")


@functools.cache
def families_table():
    """families.json as a dict: installed beside the Python package (share/kvx/families.json), or in the
    checkout the package runs from (engine/model/families.json)."""
    root = Path(__file__).resolve().parents[4]
    for path in (root / "families.json", root / "engine" / "model" / "families.json"):
        if path.is_file():
            return json.loads(path.read_text())
    raise ConvertError(f"internal: the family table families.json is neither in {root} nor in "
                       f"{root / 'engine' / 'model'}")


def kinds_of(config):
    """{"norm", "positions", "mlp"} of a config.json dict: its architecture's row, with its overrides."""
    table = families_table()
    row = table["architectures"].get(config["architecture"])
    if row is None:
        raise ConvertError(f"internal: no family '{config['architecture']}' in families.json")
    return {field: config.get(field) or row[field] for field in KIND_FIELDS}


def is_gated(mlp_kind):
    return families_table()["mlp_kinds"][mlp_kind]["gated"]


def norm_has_bias(norm_kind):
    return families_table()["norm_kinds"][norm_kind]["bias"]


def architecture_for(kinds):
    """(architecture, {field: kind} overrides) naming kinds ({"norm", "positions", "mlp"}) in config.json."""
    table = families_table()
    for field in KIND_FIELDS:
        known = table[f"{'position' if field == 'positions' else field}_kinds"]
        if kinds[field] not in known:
            raise ConvertError(f"internal: families.json has no {field} kind '{kinds[field]}'")
    for name, row in table["architectures"].items():
        if all(row[field] == kinds[field] for field in KIND_FIELDS):
            return name, {}
    base = table["architectures"][BASE_ARCHITECTURE]
    return BASE_ARCHITECTURE, {field: kinds[field] for field in KIND_FIELDS if base[field] != kinds[field]}
