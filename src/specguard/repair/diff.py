"""The config change as text, for remote checkpoints and users who want no copy:
a unified diff of each changed config file, and a vLLM ``--hf-overrides`` JSON
where one is enough.

Where an override is enough (vLLM 0.33 source):
- ``ModelConfig.__post_init__`` / ``_apply_dict_overrides``: a dict-valued
  override such as ``quantization_config`` replaces the attribute of the
  target's hf_config; ``weight_utils.get_quant_config`` then reads it.
- The MTP draft is built with the target's quant config object
  (``VllmConfig.quant_config``, built from the target's model config;
  v1/worker/gpu/spec_decode/eagle/utils.py ``load_eagle_model`` passes that
  VllmConfig to ``get_model``), so the override reaches MTP layers too.
- A DSpark draft gets a quant config of its own, built from the draft model
  config (models/utils.py ``get_draft_quant_config``), and that model config
  is built without dict overrides (config/speculative.py
  ``SpeculativeConfig.compose_draft_hf_overrides``: "Dict overrides stay
  target-only"): its quant config still comes from the files, so it needs
  the repaired directory.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from specguard.layouts import roles as r
from specguard.repair.plan import TARGET, Plan


def _text(obj: dict | None) -> list[str]:
    return (json.dumps(obj, indent=2) + "\n").splitlines(keepends=True) if obj is not None else []


def config_diff(plan: Plan, out: Path | None = None) -> str:
    """A unified diff per changed config file (JSON re-indented on both sides, so only keys differ)."""
    chunks: list[str] = []
    for ov in plan.overlays:
        src = ov.checkpoint.root or Path(ov.checkpoint.name)
        dst = out if out is not None else Path("repaired")
        if len(plan.overlays) > 1:
            dst = dst / ov.role
        pairs = [("config.json", ov.checkpoint.config, ov.config),
                 ("hf_quant_config.json", ov.checkpoint.hf_quant_config, ov.hf_quant_config)]
        for name, old, new in pairs:
            old = dict(old) if old is not None else None
            if old == new:
                continue
            chunks += difflib.unified_diff(_text(old), _text(new), f"{src}/{name}", f"{dst}/{name}")
    return "".join(chunks)


def hf_overrides(plan: Plan) -> tuple[str | None, str]:
    """``(--hf-overrides JSON, why)``; JSON is None where an override cannot fix it."""
    target = plan.overlays[0]
    changed = [ov for ov in plan.overlays if ov.changed]
    if any(ov.role != TARGET for ov in changed):
        return None, ("a separate drafter's quant config comes from its own files (vLLM 0.33 "
                      "get_draft_quant_config); serve it from the repaired directory")
    if target.reencode:
        return None, "re-encoded tensors cannot be passed as an override; serve the repaired directory"
    if target.hf_quant_config != (dict(target.checkpoint.hf_quant_config)
                                  if target.checkpoint.hf_quant_config else None):
        return None, "the claim lives in hf_quant_config.json, which --hf-overrides does not reach"
    old, new = dict(target.checkpoint.config or {}), target.config
    keys = [k for k in set(old) | set(new) if old.get(k) != new.get(k)]
    if keys != ["quantization_config"]:
        return None, f"changes {', '.join(sorted(keys))}; only quantization_config is offered as an override"
    dspark = [p for p in plan.problems if p.route.role.is_draft and p.route.role.draft_kind == r.DSPARK]
    if dspark:
        return None, ("the DSpark draft builds its own quant config from the files (get_draft_quant_config) "
                      "and vLLM 0.33 applies dict overrides to the target only "
                      "(SpeculativeConfig.compose_draft_hf_overrides); serve the draft from the repaired directory")
    text = json.dumps({"quantization_config": new["quantization_config"]}, separators=(",", ":"))
    return text, "the target's quantization_config; its MTP draft shares the target's quant config"
