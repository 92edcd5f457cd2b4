"""The published checkpoints' TRUTH (tests/data/published/<name>/truth.json, written by
scripts/published_truth.py from vLLM 0.33's real quant-config classes and their real
``get_quant_method``) is still what the installed vLLM answers, and specguard's model of
the engine gives the same method for every runtime module.

A layer vLLM falls back on when ``get_quant_method`` returns None (an embedding or LM
head: ``UnquantizedEmbeddingMethod``) counts as that fallback; a layer the model class
builds with ``quant_config=None`` is unquantized whatever the config says.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from specguard.resolve import Resolver

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "published"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return sys.modules[name]


truth_script = _script("published_truth")
published = truth_script._published()
# GLM's nextn eh_proj is a plain nn.Linear (glm4_moe_mtp.py): the recorded GLM plan says so, so
# where no exclusion covers it specguard no longer claims it ModelOptLinearMethod.
NAMES = sorted(p.parent.name for p in DATA.glob("*/truth.json"))
CASES = NAMES
UNQUANTIZED = {"UnquantizedLinearMethod", "UnquantizedEmbeddingMethod", "UnquantizedFusedMoEMethod"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("published-truth")
    return {name: published.build(name, base / name, truth_script.LAYERS) for name in NAMES}


def test_every_published_model_but_deepseek_v4_has_a_truth():
    assert set(NAMES) == set(published.MODELS) - truth_script.SKIP


@pytest.mark.parametrize("name", NAMES)
def test_truth_is_what_the_installed_vllm_answers(checkpoints, name):
    held = json.loads((DATA / name / "truth.json").read_text())
    assert truth_script.truth(name, checkpoints[name]) == held, "re-run scripts/published_truth.py"


def _same(ours: str, kind: str, truth: str) -> bool:
    if truth.startswith(truth_script.NO_QUANT_CONFIG) or truth.startswith("unquantized"):
        return ours in UNQUANTIZED or ours == "None"
    if truth == "None":  # vLLM then builds the layer's default method
        return ours in ("None", "UnquantizedEmbeddingMethod") if kind in ("embedding", "head") else ours == "None"
    if ours == "CompressedTensorsMoEMethod":  # the dispatcher: its get_moe_method picks the scheme's class
        return truth.startswith("CompressedTensors") and truth.endswith("MoEMethod")
    return ours == truth


@pytest.mark.parametrize("name", CASES)
def test_specguard_builds_what_vllm_builds(checkpoints, name):
    held = json.loads((DATA / name / "truth.json").read_text())
    r = Resolver.open(checkpoints[name])
    routes = {rt.prefix: rt for rt in r.routes()}
    assert set(held) <= set(routes)
    wrong = {p: (routes[p].vllm.method, t) for p, t in held.items()
             if not _same(routes[p].vllm.method, routes[p].kind, t)}
    assert not wrong, wrong


def _quantized(truth: str) -> bool:
    return not (truth.startswith((truth_script.NO_QUANT_CONFIG, "unquantized")) or truth == "None"
                or truth in UNQUANTIZED)


@pytest.mark.parametrize("name", CASES)
def test_misroutes_are_exactly_the_truths(checkpoints, name):
    """Every module vLLM 0.33 builds quantized over unquantized storage, or unquantized over
    quantized storage (its real get_quant_method, truth.json), is misrouted, and nothing else."""
    held = json.loads((DATA / name / "truth.json").read_text())
    r = Resolver.open(checkpoints[name])
    routes = {rt.prefix: rt for rt in r.routes()}
    truth = {p for p, t in held.items() if routes[p].stored.quantized != _quantized(t)}
    ours = {p for p, rt in routes.items() if rt.verdict == "misrouted"}
    assert ours == truth


# EAGLE-3 drafters routed beside their FP8 target, as vLLM serves them (``--draft``).
TARGETS = {"eagle3-llama3.1-8b": "llama-3.1-8b-fp8", "eagle3-llama3.1-8b-with-target-quant-config": "llama-3.1-8b-fp8"}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_an_eagle3_drafter_over_its_fp8_target_builds_what_vllm_builds(checkpoints, name):
    """vLLM 0.33 builds an EAGLE-3 drafter with its own quant config (llama_eagle3.py
    ``get_draft_quant_config``), whatever the target's: truth.json (the drafter alone) holds
    beside the FP8 target too, and the misroutes are the truth's, nothing else."""
    held = json.loads((DATA / name / "truth.json").read_text())
    alone = {rt.prefix: rt.checkpoint_names for rt in Resolver.open(checkpoints[name]).routes()}
    target = Resolver.open(checkpoints[TARGETS[name]])
    pair = Resolver.open(checkpoints[name], target=target, draft_method="eagle3")
    by_names = {rt.checkpoint_names: rt for rt in pair.routes()}
    routes = {p: by_names[alone[p]] for p in held}
    wrong = {p: (rt.vllm.method, held[p]) for p, rt in routes.items() if not _same(rt.vllm.method, rt.kind, held[p])}
    assert not wrong, wrong
    misrouted = {p for p, rt in routes.items() if rt.verdict == "misrouted"}
    assert misrouted == {p for p, t in held.items() if routes[p].stored.quantized != _quantized(t)}
