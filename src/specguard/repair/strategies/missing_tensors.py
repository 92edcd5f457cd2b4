"""Beyond repair: a module stored in the format the engine builds but without tensors
that format needs (S5: NVFP4 draft experts without ``weight_scale_2``/``input_scale``),
or whose stored format cannot be told. A per-tensor global scale fixes the value of
every stored element; it cannot be derived from the bytes, so nothing is invented."""

from __future__ import annotations

from specguard.formats import scheme as s
from specguard.repair.plan import Plan, Problem, Unrepairable, describe
from specguard.resolve import MISSING

UNREADABLE = (s.UNKNOWN, s.AMBIGUOUS, s.MIXED)


def apply(plan: Plan, problems: list[Problem]) -> None:
    for p in problems:
        rt = p.route
        if rt.verdict != MISSING or rt.stored is None:
            continue  # nothing stored at all: draft_layers' case
        names = describe(rt.checkpoint_names)
        if rt.stored.format in UNREADABLE:
            raise Unrepairable(p.where, f"stored format is {rt.stored.format} ({rt.stored.reason}) in {names}; "
                                        "fix re-encodes only what it can read exactly; nothing written")
        if rt.missing:
            raise Unrepairable(
                p.where,
                f"stored {rt.stored.short()} without {', '.join(rt.missing)} in {names}; the engine "
                f"builds {rt.vllm.method if rt.vllm else rt.stored.format}, which reads them, and they "
                "cannot be derived from the stored bytes (a global scale sets the value of every element); "
                "nothing written. Re-export these modules with their scales.")
