"""A fix as data: the edits of a checkpoint's config files it makes, the modules it
re-encodes, and its applicability (in the manner of ruff's ``Applicability``).
Edits apply to copies of the config dicts (never to files), so a fix can be
re-routed before it is printed; lint prints them and ``specguard fix`` writes
exactly them (repair/plan.py plans both).

    edit = ConfigEdit("config.json", ("quantization_config", "ignore"), "extend", ["mtp.*"])
    config, hf_quant = edit.apply(config, hf_quant)
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specguard.vocabulary import Vocabulary

CONFIG_JSON = "config.json"
HF_QUANT_JSON = "hf_quant_config.json"
# splice: replace the item at ``index`` by ``value`` (a list); discard: drop the items of ``value``
# wherever they are (the key goes when its list is left empty)
OPS = ("set", "extend", "remove", "splice", "discard")
_KEY = re.compile(r"^(?P<path>[\w.]+?)\[(?P<index>\d+)\]$")


@dataclass(frozen=True)
class ConfigEdit:
    """Set a key, extend a list, remove a list item (by index or by value), or splice items into a list."""

    file: str  # CONFIG_JSON or HF_QUANT_JSON
    path: tuple[str, ...]  # keys from the file's top down to the value
    op: str
    value: Any = None
    index: int | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown edit op {self.op!r}; expected one of {OPS}")

    def apply(self, config: Mapping | None, hf_quant: Mapping | None) -> tuple[dict, dict | None]:
        """Edited deep copies of (config.json, hf_quant_config.json)."""
        cfg = copy.deepcopy(dict(config or {}))
        hf = copy.deepcopy(dict(hf_quant)) if hf_quant is not None else None
        root = cfg if self.file == CONFIG_JSON else hf
        if root is None:
            raise ValueError(f"no {self.file} to edit")
        if self.file == CONFIG_JSON and self.path[0] not in root and isinstance(root.get("text_config"), dict):
            root = root["text_config"]  # multimodal configs keep the claim in text_config
        parent = root
        for key in self.path[:-1]:
            parent = parent.setdefault(key, {})
        leaf = self.path[-1]
        if self.op == "set":
            parent[leaf] = copy.deepcopy(self.value)
            return cfg, hf
        items = list(parent.get(leaf) or [])
        if self.op == "discard":
            kept = [v for v in items if v not in self.value]
            if kept:
                parent[leaf] = kept
            else:
                parent.pop(leaf, None)
            return cfg, hf
        if self.op == "extend":
            items += [v for v in self.value if v not in items]
        else:
            if self.index is None:
                raise ValueError(f"{self.op} needs an index")
            if self.op == "remove":
                del items[self.index]
            else:
                items[self.index:self.index + 1] = list(self.value)
        parent[leaf] = items
        return cfg, hf

    def __str__(self) -> str:
        where = f"{self.file} {'.'.join(self.path)}"
        if self.op == "set":
            return f"set {where} = {json.dumps(self.value)}"
        if self.op == "extend":
            return f"add {', '.join(json.dumps(v) for v in self.value)} to {where}"
        if self.op == "remove":
            return f"remove {where}[{self.index}]"
        if self.op == "discard":
            return f"remove {', '.join(json.dumps(v) for v in self.value)} from {where}"
        return f"replace {where}[{self.index}] by {', '.join(json.dumps(v) for v in self.value)}"

    def as_dict(self) -> dict:
        return {"file": self.file, "path": list(self.path), "op": self.op, "value": self.value, "index": self.index}


def at_key(key: str) -> tuple[str, tuple[str, ...], int | None]:
    """(file, path, index) of a pattern's ``key`` as the declared parsers write it:
    ``quantization_config.ignored_layers[0]`` or
    ``hf_quant_config.json:quantization.exclude_modules[3]``."""
    file = CONFIG_JSON
    if key.startswith(f"{HF_QUANT_JSON}:"):
        file, key = HF_QUANT_JSON, key.split(":", 1)[1]
    m = _KEY.match(key)
    if m is None:
        return file, tuple(key.split(".")), None
    return file, tuple(m.group("path").split(".")), int(m.group("index"))


def apply_all(edits: Iterable[ConfigEdit], config: Mapping | None,
              hf_quant: Mapping | None) -> tuple[dict, dict | None]:
    cfg, hf = dict(config or {}), dict(hf_quant) if hf_quant is not None else None
    for e in edits:
        cfg, hf = e.apply(cfg, hf)
    return cfg, hf


class Applicability(Vocabulary):
    """What applying a fix takes (ruff's ``Applicability``, with a re-encode step)."""

    SAFE = "safe"  # config edits that route the modules as stored on every platform
    PLATFORM = "platform-specific"  # config edits right only on ``Fix.platforms``
    REENCODE = "needs-reencode"  # also rewrites tensors (exact): `specguard fix --out` writes them
    DISPLAY = "display-only"  # advice: nothing specguard can apply


@dataclass(frozen=True)
class Fix:
    """A finding's fix: what to do (``message``), the config edits and re-encodes that
    do it, and where it applies."""

    message: str
    edits: tuple[ConfigEdit, ...] = ()
    applicability: Applicability = Applicability.DISPLAY
    platforms: tuple[str, ...] = ()  # PLATFORM: the platform classes it is right on
    reencode: tuple[str, ...] = ()  # checkpoint modules rewritten (REENCODE)
    targets: tuple[str, ...] = ()  # runtime prefixes it makes route as stored

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict:
        return {"applicability": self.applicability, "platforms": list(self.platforms),
                "edits": [e.as_dict() for e in self.edits], "reencode": list(self.reencode),
                "targets": list(self.targets)}
