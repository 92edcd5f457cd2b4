"""Published-config copies routed with ``--engine sglang-0.5.23`` (tests/data/published/SOURCES.md;
scripts/published_sparse.py writes them): what SGLang 0.5.23 loads as stored, what it cannot be
vouched for (SG205), and no finding that only vLLM's names would raise.

GLM-4.7 NVFP4's three variants are also recorded from SGLang's own code
(plans/sglang-0.5.23/glm4_moe.json, checked in test_sglang_engine.py and re-recorded in
test_sglang_recorded.py); the draft's quant-config drop is read from glm4_moe_nextn.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.lint import lint
from specguard.resolve import MISROUTED, OK, Resolver
from tests.engines import overlays

KEY = "sglang-0.5.23"
_spec = importlib.util.spec_from_file_location("published_sparse", overlays.ROOT / "scripts/published_sparse.py")
assert _spec is not None and _spec.loader is not None
published = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("published_sparse", published)
_spec.loader.exec_module(published)

# Lint codes under SGLang 0.5.23, per copy (4 main layers + every draft layer).
EXPECTED = {
    # GLM-4.7 NVFP4 with its nextn layer grafted BF16: SGLang builds that draft with no quant config
    # (glm4_moe_nextn.py, modelopt_fp4), so every variant loads as stored, where vLLM misroutes two.
    "glm-4.7-nvfp4": set(),
    "glm-4.7-nvfp4-mtp-not-excluded": set(),
    "glm-4.7-nvfp4-mtp-excluded-by-checkpoint-names": set(),
    # compressed-tensors FP8 (recorded: plans/sglang-0.5.23/compressed_tensors.json): the GLM NextN
    # draft keeps the quant config, its BF16 graft is built FP8 (SG203); as published it loads as stored
    "glm-4.5-air-fp8": set(),
    "glm-4.5-air-fp8-mtp-bf16-not-excluded": {"SG203"},
    # the exclusion written for vLLM's prefixes (re:model.layers.46.*) matches no model.decoder.* name
    "glm-4.5-air-fp8-mtp-bf16-excluded": {"SG101", "SG203"},
    "gpt-oss-20b": set(),  # Mxfp4Config, experts only (recorded: gpt_oss.json): loads as stored
    # ERNIE / Qwen3-Next drafts found by vLLM's plan under SGLang too: no SG301/SG302 false alarm
    "ernie-4.5-21b-a3b": {"SG205"},
    "qwen3-next-fp8": {"SG205"},
    # DSpark's confidence head is a plain nn.Linear in SGLang (dspark.py): its F32 bytes load as stored
    "deepseek-v4-flash-dspark": set(),
    "deepseek-v3-fp8": set(),
    "deepseek-r1-nvfp4": {"SG301"},  # no MTP layer stored though the config promises one
    # Qwen3.5 MTP (Qwen3.8 FP8, text-only): the release's ten mtp.* entries keep attention, shared expert
    # and fc BF16; SGLang loads every module as stored
    "qwen3.8-2.4t-a95b-fp8": set(),
    # ... without them (MTP grafted BF16): SGLang builds qkv_proj/o_proj and the experts FP8 over BF16;
    # fc is a plain nn.Linear and the shared expert is skipped by layer 0's entries (recorded)
    "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded": {"SG203"},
    # NVFP4 export, BF16 MTP: qwen3_5_mtp.py drops a serialized modelopt_fp4 config for the whole draft
    "qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16": set(),
}


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("published-sglang")
    names = [*EXPECTED, "llama-3.1-8b-fp8", "eagle3-llama3.1-8b"]
    return {name: published.build(name, base / name, 4) for name in names}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_published_copy_under_sglang(copies: dict[str, Path], name: str) -> None:
    r = Resolver.open(copies[name], engine=KEY)
    findings = lint([r]).findings
    assert {f.code for f in findings} == EXPECTED[name], [f"{f.code}: {f.message}" for f in findings]


def test_glm_nvfp4_draft_is_built_bf16_by_sglang_and_nvfp4_by_vllm(copies: dict[str, Path]) -> None:
    path = copies["glm-4.7-nvfp4-mtp-not-excluded"]
    sglang = {rt.prefix: rt for rt in Resolver.open(path, engine=KEY).routes()}
    vllm = {rt.prefix: rt.verdict for rt in Resolver.open(path, engine="vllm-0.33").routes()}
    assert vllm["model.layers.4.mlp.experts"] == MISROUTED
    experts = sglang["model.decoder.mlp.experts"]  # SGLang's own prefix for the nextn layer's experts
    assert experts.verdict == OK and experts.vllm is not None and not experts.vllm.scheme.quantized
    assert experts.role.is_draft
    assert sglang["model.eh_proj"].verdict == OK and sglang["model.layers.3.mlp.experts"].verdict == OK
    assert {rt.verdict for rt in sglang.values()} == {OK}


def test_route_all_on_glm_shows_the_engines_differ(copies: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["route", str(copies["glm-4.7-nvfp4-mtp-not-excluded"]), "--engine", "all"]) == 1
    out = capsys.readouterr().out
    assert "vllm-0.33: nvfp4 misrouted" in out and "sglang-0.5.23: bf16 ok" in out
    assert "the engines differ on 6 module(s)" in out


def test_a_separate_eagle3_drafter_under_sglang_loads_as_stored(copies: dict[str, Path]) -> None:
    """The published EAGLE-3 head (no quant config of its own) under SGLang: its own ModelConfig
    gives it no quant config (plans/sglang-0.5.23/eagle.json), so every layer is built as stored,
    at SGLang's own prefixes (model.qkv_proj, not vLLM's model.layers.{N}.self_attn.qkv_proj)."""
    target = Resolver.open(copies["llama-3.1-8b-fp8"], engine=KEY, own_draft=False)
    drafter = Resolver.open(copies["eagle3-llama3.1-8b"], engine=KEY, draft_method="eagle", target=target)
    routes = {rt.prefix: rt for rt in drafter.routes()}
    assert {"model.qkv_proj", "model.self_attn.o_proj", "model.gate_up_proj", "model.down_proj"} <= set(routes)
    assert {rt.verdict for rt in routes.values()} == {OK}
    assert not lint([drafter]).findings


QWEN_BARE = "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded"


def test_qwen3_5_mtp_routes_as_sglangs_source_builds_it(copies: dict[str, Path]) -> None:
    """The MTP grafted BF16 under the FP8 release's list without its mtp.* entries, module by module:
    SGLang (qwen3_5_mtp.py, fp8.py, recorded in plans/sglang-0.5.23/qwen3_5.json) against vLLM 0.33."""
    sglang = {rt.prefix: rt for rt in Resolver.open(copies[QWEN_BARE], engine=KEY).routes()}
    vllm = {rt.prefix: rt.verdict for rt in Resolver.open(copies[QWEN_BARE], engine="vllm-0.33").routes()}
    misrouted = {p for p, rt in sglang.items() if rt.verdict == MISROUTED}
    assert misrouted == {"mtp.layers.0.self_attn.qkv_proj", "mtp.layers.0.self_attn.o_proj", "mtp.layers.0.mlp.experts"}
    fc = sglang["mtp.fc"]  # qwen3_5_mtp.py: self.fc = nn.Linear(...), no quant config reaches it
    assert fc.verdict == OK and fc.vllm is not None and fc.vllm.method == "UnquantizedLinearMethod"
    shared = sglang["mtp.layers.0.mlp.shared_expert.gate_up_proj"]  # "layers.0.mlp.shared_expert.gate_proj" matches
    assert shared.verdict == OK and shared.role.is_draft
    assert vllm["mtp.fc"] == vllm["mtp.layers.0.mlp.shared_expert.gate_up_proj"] == MISROUTED
    assert all(rt.verdict == OK for p, rt in sglang.items() if not p.startswith("mtp."))


def test_route_all_on_qwen3_5_shows_the_engines_differ(copies: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["route", str(copies["qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16"]), "--engine", "all"]) == 1
    out = capsys.readouterr().out
    assert "vllm-0.33: nvfp4 misrouted" in out and "sglang-0.5.23: bf16 ok" in out
    assert "the engines differ on 1 module(s): mtp.fc" in out
    assert main(["route", str(copies[QWEN_BARE]), "--engine", "all"]) == 1
    assert "the engines differ on 3 module(s)" in capsys.readouterr().out


def test_qwen3_5_compressed_tensors_copy_under_sglang() -> None:
    """The published Qwen3.6 compressed-tensors config (tests/data/published/qwen3_5_dense_ct_mtpfile):
    SGLang's compressed-tensors matching (engines/sglang/patterns.py ``ct_*``, checked against SGLang's
    own on Q0-CT/Q4-FC in test_sglang_oss_ct.py) picks the ``group_mtp`` regex target (names and
    ``re:`` before class names) for the drafter's projections: INT4 g32, as stored; ``fc`` is a plain
    ``nn.Linear`` (qwen3_5_mtp.py)."""
    import json

    from specguard.engines.sglang.v0_5_23 import Sglang0523
    from specguard.layouts import roles as r

    data = overlays.ROOT / "tests/data/published/qwen3_5_dense_ct_mtpfile"
    model = Sglang0523(json.loads((data / "config.json").read_text()))
    assert model.layout.family == "qwen3_5"
    for prefix, kind in (("mtp.layers.0.self_attn.qkv_proj", r.LINEAR), ("mtp.layers.0.mlp.gate_up_proj", r.LINEAR)):
        built = model.builds(prefix, kind=kind)
        assert (built.scheme.format, built.scheme.group_size) == ("int4_group", 32), built
        assert "re:.*mtp\\..*proj$" in built.reason
    assert not model.builds("mtp.fc", kind=r.LINEAR).scheme.quantized
