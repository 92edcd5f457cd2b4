"""No false alarm on published checkpoints, and every true finding still found.

The checkpoints are sparse copies written from the publishers' configs by
scripts/published_sparse.py (tests/data/published/SOURCES.md says where each file
came from; tests/data/published/TRIAGE.md lists what specguard said before issue 12 and why each
finding was true or false). Three main layers and every draft layer are kept so
each lints in well under a second.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from specguard.lint import lint
from specguard.resolve import Resolver

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("published_sparse", ROOT / "scripts" / "published_sparse.py")
published = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("published_sparse", published)
_spec.loader.exec_module(published)

LAYERS = 4
# The true findings of each published checkpoint (tests/data/published/TRIAGE.md); every other finding is a false alarm.
EXPECTED = {
    "deepseek-v3-fp8": set(),
    "deepseek-r1-nvfp4": {"SG301"},  # num_nextn_predict_layers: 1 but no MTP layer stored (A3)
    "deepseek-v4-flash": set(),
    "deepseek-v4-flash-dspark": set(),
    "mimo-7b": set(),
    "gpt-oss-20b": set(),
    "eagle3-llama3.1-8b": set(),
    # GLM-4.7 NVFP4 with the nextn layer grafted in BF16 (tests/data/published/SOURCES.md): excluded by its runtime
    # prefix it loads; not excluded, vLLM builds its attention, experts and head NVFP4 over BF16
    # (truth.json: ModelOpt's real get_quant_method); excluded by checkpoint names, its head
    # (runtime prefix model.layers.N.head) is still built NVFP4 and the entry is dead.
    # NVFP4 over BF16 also stops vLLM at load: the packed [out, in/2] weight parameter's shape check (SG701).
    "glm-4.7-nvfp4": set(),
    "glm-4.7-nvfp4-mtp-not-excluded": {"SG203", "SG701"},
    "glm-4.7-nvfp4-mtp-excluded-by-checkpoint-names": {"SG203", "SG101", "SG701"},
    # GLM-4.5-Air-FP8 (compressed-tensors, channel FP8): its ignore list names q/k/v biases and the
    # nextn layer's embedding, which vLLM never asks about: dead entries, but every module they name
    # loads as stored, so no finding (SG101 speaks only where the dead entry leaves a misroute).
    # The nextn layer grafted in BF16 and not excluded is built FP8 (copy_ converts BF16 into the
    # FP8 parameter: it loads, no SG701); excluded by vLLM's prefixes: ok.
    "glm-4.5-air-fp8": set(),
    "glm-4.5-air-fp8-mtp-bf16-not-excluded": {"SG203"},
    "glm-4.5-air-fp8-mtp-bf16-excluded": set(),
    # Qwen3-Next FP8: no num_nextn_predict_layers, vLLM builds 1 MTP layer (issue 26 item 3: no SG302).
    "qwen3-next-fp8": set(),
    "qwen3-next-fp8-mtp-bf16-not-excluded": {"SG203"},
    # ERNIE-4.5 (issue 26 item 1): the BF16 release is clean; an FP8 trunk excluding its MTP by vLLM's
    # prefix is clean; by checkpoint names (re:.*mtp.*) the entry is dead and the MTP built FP8.
    "ernie-4.5-21b-a3b": set(),
    "ernie-4.5-21b-a3b-fp8": set(),
    "ernie-4.5-21b-a3b-fp8-mtp-excluded-by-checkpoint-names": {"SG203", "SG101"},
    # EAGLE-3 over FP8 Llama: the drafter uses its own quant config (get_draft_quant_config); given the
    # target's, its F16 layers are built FP8 (test_published_truth.py checks the pair).
    "llama-3.1-8b-fp8": set(),
    "eagle3-llama3.1-8b-with-target-quant-config": {"SG203"},
    # Qwen3.8 FP8 (Qwen3.5 MoE text): the release's mtp.* entries keep the BF16 parts BF16; without them
    # (MTP grafted BF16) vLLM builds fc, attention, experts and shared expert FP8 over BF16; the NVFP4
    # export built from it excludes mtp.layers.0* but not mtp.fc, built NVFP4 over BF16 (SG701 at load).
    # (SGLang's verdicts: tests/engines/test_sglang_published.py.)
    "qwen3.8-2.4t-a95b-fp8": set(),
    "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded": {"SG203"},
    "qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16": {"SG203", "SG701"},
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("published")
    return {name: published.build(name, base / name, LAYERS) for name in published.MODELS}


def test_every_published_model_has_an_expectation():
    assert set(EXPECTED) == set(published.MODELS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_published_checkpoint_findings(checkpoints, name):
    r = Resolver.open(checkpoints[name])
    findings = lint([r]).findings
    assert {f.code for f in findings} == EXPECTED[name], [f"{f.code}: {f.message}" for f in findings]
    bad = [(rt.prefix, rt.verdict, rt.reason) for rt in r.routes()
           if rt.verdict != "ok" and not (name == "deepseek-r1-nvfp4" and rt.verdict == "missing")]
    assert not bad or EXPECTED[name] & {"SG203"}  # misroutes: test_published_truth.py says which


def test_fused_shard_exclusions_are_live(checkpoints):
    """ModelOpt excludes q_a_proj and kv_a_proj_with_mqa: vLLM skips the fused
    fused_qkv_a_proj built from them (is_layer_skipped with packed_modules_mapping)."""
    r = Resolver.open(checkpoints["deepseek-r1-nvfp4"])
    rt = r.route("model.layers.0.self_attn.fused_qkv_a_proj")
    assert rt.verdict == "ok"
    assert not rt.declared.quantized and not rt.vllm.quantized
    assert "q_a_proj" in rt.declared.source
    assert not [f for f in lint([r]).findings if f.code == "SG101"]


def test_mtp_on_a_dspark_checkpoint_names_the_missing_inputs(checkpoints):
    r = Resolver.open(checkpoints["deepseek-v4-flash-dspark"], draft_method="mtp")
    findings = lint([r]).findings
    hit = [f for f in findings if f.severity == "error" and "e_proj" in f.message]
    assert hit, [f"{f.code}: {f.message}" for f in findings]
    for tensor in ("e_proj", "h_proj", "enorm", "hnorm"):
        assert tensor in hit[0].message
    assert not [f for f in findings if "markov" in f.message or "confidence" in f.message]


def test_dspark_heads_are_not_quantized_linears(checkpoints):
    r = Resolver.open(checkpoints["deepseek-v4-flash-dspark"])
    heads = [rt for rt in r.routes() if "markov_head" in rt.prefix or "confidence_head" in rt.prefix]
    assert len(heads) == 3
    for rt in heads:
        assert rt.verdict == "ok" and not rt.vllm.quantized, (rt.prefix, rt.vllm)


def test_eagle_beside_a_target_that_stores_mtp(checkpoints):
    target = Resolver.open(checkpoints["deepseek-v3-fp8"], draft_method="eagle")
    drafter = Resolver.open(checkpoints["eagle3-llama3.1-8b"], draft_method="eagle", target=target)
    roles = {rt.role.draft_kind for rt in target.routes() + drafter.routes() if rt.role.is_draft}
    assert roles == {"eagle"}
    assert all(rt.verdict == "ok" for rt in target.routes() + drafter.routes())


def test_eagle_drafter_alone_is_a_draft(checkpoints):
    r = Resolver.open(checkpoints["eagle3-llama3.1-8b"])
    roles = {n: r.layout.role(n) for n in r.table.modules}
    assert all(role.is_draft or role.kind in ("head", "embedding") for role in roles.values()), roles


def test_labels(checkpoints):
    """F32 parameters are declared as stored; integer tensors and EAGLE's maps are no linears."""
    v4 = Resolver.open(checkpoints["deepseek-v4-flash"])
    hc = next(rt for rt in v4.routes() if rt.prefix.endswith("hc_attn_fn"))
    assert hc.stored.format == "fp32" and hc.declared.scheme.format == "fp32"
    tid = next(rt for rt in v4.routes() if rt.prefix.endswith("tid2eid"))
    assert tid.stored.format not in ("plain",) and tid.vllm.method == "Parameter"
    eagle = Resolver.open(checkpoints["eagle3-llama3.1-8b"])
    d2t = next(rt for rt in eagle.routes() if rt.prefix.endswith("d2t") or "d2t" in rt.prefix)
    assert d2t.vllm.method == "Parameter" and d2t.stored.short() == "integer (i64)"
    mimo = Resolver.open(checkpoints["mimo-7b"])
    assert mimo.route("model.embed_tokens").vllm.method == "UnquantizedEmbeddingMethod"
