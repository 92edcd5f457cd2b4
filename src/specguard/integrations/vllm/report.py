"""Start-up log: one line per corrected module group, then a summary.

    specguard: model.layers.2-4.ffn.experts (draft; checkpoint mtp.0-2.ffn.experts.*):
        stored MXFP4, vLLM would build NVFP4 -> routed MXFP4
    specguard: 3 draft expert layers stored MXFP4, vLLM would build NVFP4 -> routed MXFP4
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specguard.formats import scheme as s
from specguard.integrations.vllm.methods import EXPERTS, UNQUANTIZED
from specguard.integrations.vllm.routing import Decision

_LAYER = re.compile(r"^(.*?layers\.)(\d+)(\..*)$")
_LABELS = {
    UNQUANTIZED: "unquantized", s.BF16: "BF16", s.FP16: "FP16", s.FP32: "FP32",
    s.FP8_BLOCK: "FP8 block", s.FP8_TENSOR: "FP8 per-tensor", s.FP8_CHANNEL: "FP8 per-channel",
}


def label(fmt: str | None) -> str:
    if fmt is None:
        return "?"
    return _LABELS.get(fmt, fmt.upper())


@dataclass(frozen=True)
class _Key:
    head: str  # prefix before the layer index: "model.layers."
    tail: str  # after it: ".ffn.experts"
    kind: str
    role: str
    stored: str
    vllm: str
    routed: str | None
    note: str


def lines(decisions: Sequence[Decision]) -> list[str]:
    """Group lines (runtime module family, layer range) followed by summary lines."""
    groups: dict[_Key, list[Decision]] = {}
    for d in decisions:
        m = _LAYER.match(d.prefix)
        head, tail = (m.group(1), m.group(3)) if m else (d.prefix, "")
        key = _Key(head, tail, d.kind, d.role, d.stored, d.vllm, d.routed, d.note)
        groups.setdefault(key, []).append(d)
    out = [_group_line(k, ds) for k, ds in groups.items()]
    return out + _summary(decisions)


def _group_line(key: _Key, ds: list[Decision]) -> str:
    layers = sorted({int(m.group(2)) for d in ds if (m := _LAYER.match(d.prefix))})
    where = f"{key.head}{_ranges(layers)}{key.tail}" if layers else key.head
    names = sorted({n for d in ds for n in d.checkpoint_names})
    ckpt = f"; checkpoint {_compact(names)}" if names else ""
    return f"specguard: {where} ({key.role}{ckpt}): {_verdict(key.stored, key.vllm, key.routed, key.note)}"


def _summary(decisions: Sequence[Decision]) -> list[str]:
    counts: dict[tuple[str, str, str, str, str | None, str], int] = {}
    for d in decisions:
        k = (d.role, d.kind, d.stored, d.vllm, d.routed, d.note)
        counts[k] = counts.get(k, 0) + 1
    out = []
    for (role, kind, stored, vllm, routed, note), n in counts.items():
        what = "expert" if kind == EXPERTS else "linear"
        noun = f"{what} layer" + ("s" if n != 1 else "")
        out.append(f"specguard: {n} {role} {noun} {_verdict(stored, vllm, routed, note)}")
    return out


def _verdict(stored: str, vllm: str, routed: str | None, note: str) -> str:
    text = f"stored {label(stored)}, vLLM would build {label(vllm)}"
    if routed is not None:
        return f"{text} -> routed {label(routed)}" + (f" ({note})" if note else "")
    return f"{text} -> left as vLLM built it ({note})" if note else f"{text} -> left as vLLM built it"


def _ranges(values: Iterable[int]) -> str:
    """[2, 3, 4, 7] -> '2-4,7'."""
    out: list[str] = []
    run: list[int] = []
    for v in sorted(values):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(_run(run))
        run = [v]
    if run:
        out.append(_run(run))
    return ",".join(out)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


_NUMBERED = re.compile(r"^(\w+)\.(\d+)\.(.*)$")


def _compact(names: list[str]) -> str:
    """Checkpoint names run-length grouped: mtp.0.ffn.experts.{0-3}.w{1,2,3} -> mtp.0.ffn.experts.*"""
    if len(names) <= 2:
        return ", ".join(names)
    stems: dict[tuple[str, str], list[int]] = {}
    for n in names:
        m = _NUMBERED.match(n)
        head, idx, rest = (m.group(1), int(m.group(2)), m.group(3)) if m else (n, -1, "")
        rest = re.sub(r"\.\d+\..*$", ".*", rest)  # experts.7.w1 -> experts.*
        stems.setdefault((head, rest), []).append(idx)
    parts = []
    for (head, rest), idxs in stems.items():
        nums = sorted({i for i in idxs if i >= 0})
        parts.append(f"{head}.{_ranges(nums)}.{rest}" if nums else head)
    return ", ".join(parts)
