"""A config that promises MTP layers the checkpoint does not store (S7): the engine
would build them and run them randomly initialised. The config is made to say
what is stored (``num_nextn_predict_layers``); serving with MTP then fails at
start-up instead of drafting noise."""

from __future__ import annotations

from specguard.layouts.registry import text_config
from specguard.repair.plan import Plan, Problem, Unrepairable
from specguard.repair.strategies.common import settle
from specguard.resolve import MISSING

# vLLM 0.33 config/speculative.py SpeculativeConfig.__post_init__ takes n_predict from
# num_nextn_predict_layers and tests ``num_speculative_tokens % n_predict``: 0 layers and an
# MTP --speculative-config stop the start-up with ZeroDivisionError.
NO_DRAFTER = ("the model then has no drafter: serve it without --speculative-config (vLLM 0.33 with an MTP "
              "speculative config fails at start-up with ZeroDivisionError)")


def apply(plan: Plan, problems: list[Problem]) -> None:
    absent = [p for p in problems if p.route.verdict == MISSING and p.route.stored is None
              and p.route.role.is_draft]
    if not absent:
        return
    stored_of: dict[int, list[int]] = {}
    for p in absent:
        cfg = text_config(p.overlay.config)
        layout = p.resolver.layout
        if id(p.resolver) not in stored_of:
            # experts of a layer share its role: one question per projection, not per expert
            roles = [layout.role(m) for m in p.resolver.alike_names]
            stored_of[id(p.resolver)] = sorted({x.layer for x in roles if x.is_draft and x.layer is not None})
        stored = stored_of[id(p.resolver)]
        if stored != list(layout.draft_layers[: len(stored)]) or "num_nextn_predict_layers" not in cfg \
                or "dspark_target_layer_ids" in cfg:
            raise Unrepairable(p.where, f"{p.route.reason}; fix only lowers num_nextn_predict_layers of an "
                                        "MTP config to the trailing layers stored")
        why = f"{layout.num_draft_layers} declared, {len(stored)} stored"
        if not stored:
            why += f"; {NO_DRAFTER}"
        p.overlay.set_key("num_nextn_predict_layers", len(stored), why,
                          [q.route.prefix for q in absent if q.overlay is p.overlay])
    settle(absent)
