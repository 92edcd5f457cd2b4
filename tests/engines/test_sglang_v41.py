"""DeepSeek-V4.1 under SGLang 0.5.23 (docs/engines.md "SGLang 0.5.23"): SGLang serves it with
its V4 classes. Recorded on CPU (plans/sglang-0.5.23/deepseek_v4.json ``s1-dspark-v41``,
``s3-v41``: factory checkpoints declared ``deepseek_v41`` / ``DeepseekV41ForCausalLM``), SGLang's
ModelConfig builds ``DeepseekV4ForCausalLM`` (configs/deepseek_v41.py
``normalize_deepseek_v41_config``), drafts it DSpark when the config carries a ``dspark_*`` key,
else NextN (where vLLM refuses a classic-MTP V4.1 draft), and gives it V4's quant config. The
modules only V4.1 builds (engram, the V4.1 indexer, the vision tower) are read, not restated:
``unknown``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.engines.sglang.v0_5_23 import Sglang0523
from specguard.errors import LayoutError
from specguard.factory import write_scenario
from specguard.layouts import layout_for
from specguard.layouts import roles as r
from specguard.layouts.base import SGLANG
from specguard.resolve import OK, UNKNOWN, Resolver
from tests.engines import overlays

KEY = "sglang-0.5.23"
RECORD = json.loads((overlays.ROOT / "src/specguard/plans/sglang-0.5.23/deepseek_v4.json").read_text())["cases"]


def _v41(scenario: str, root: Path) -> Path:
    write_scenario(scenario, root)
    config = json.loads((root / "config.json").read_text())
    config.update(model_type="deepseek_v41", architectures=["DeepseekV41ForCausalLM"])
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture(scope="module")
def v41(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("v41")
    return {name: _v41(name, base / name) for name in ("s1-dspark", "s3")}


def test_recorded_v41_is_built_by_sglangs_v4_classes() -> None:
    for case, draft in (("s1-dspark-v41", "DeepseekV4ForCausalLMDSpark"), ("s3-v41", "DeepseekV4ForCausalLMNextN")):
        facts = RECORD[case]
        assert facts["target"]["architecture"] == "DeepseekV4ForCausalLM"
        assert facts["draft"]["architecture"] == draft
        assert facts["target"]["quant_config"]["class"] == facts["draft"]["quant_config"]["class"]
        assert facts["target"]["quant_config"]["class"].endswith("fp8.Fp8Config")
    # V4's answers: the same per-prefix matching and is_fp4_experts as the V4 checkpoint
    assert RECORD["s1-dspark-v41"]["draft"]["quant_config"]["prefixes"] == \
        RECORD["s1-dspark"]["draft"]["quant_config"]["prefixes"]


def test_v41_routes_as_sglang_builds_it(v41: dict[str, Path]) -> None:
    """S1-DSpark as V4.1: SGLang builds every routed-expert layer MXFP4 as for V4 (the target's NVFP4
    experts misrouted, the DSpark stages refused as for V4: no dspark_markov_rank); S3 as V4.1: its
    MTP layer is SGLang's NextN draft (``model.decoder``), loaded as stored, where vLLM lays it out
    as a DSpark stage."""
    routes = {rt.prefix: rt.verdict for rt in Resolver.open(v41["s1-dspark"], engine=KEY).routes()}
    v4 = {rt.prefix: rt.verdict for rt in Resolver.open(_v4_copy(v41["s1-dspark"]), engine=KEY).routes()}
    assert routes == v4 and UNKNOWN not in routes.values()
    s3 = Resolver.open(v41["s3"], engine=KEY)
    assert s3.layout.draft_kind == r.MTP and "model.decoder.mlp.experts" in s3.prefixes()
    assert {rt.verdict for rt in s3.routes()} == {OK}
    assert Resolver.open(v41["s3"], engine="vllm-0.33").layout.draft_kind == r.DSPARK


def _v4_copy(path: Path) -> Path:
    out = path.with_name(path.name + "-as-v4")
    if not out.exists():
        out.mkdir()
        for f in path.iterdir():
            (out / f.name).symlink_to(f)
        config = json.loads((path / "config.json").read_text())
        config.update(model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"])
        (out / "config.json").unlink()
        (out / "config.json").write_text(json.dumps(config))
    return out


def test_a_classic_mtp_v41_draft_is_sglangs_nextn_and_vllms_refusal() -> None:
    config = {"model_type": "deepseek_v41", "num_hidden_layers": 2, "num_nextn_predict_layers": 1}
    assert layout_for(config, draft_method="mtp", engine=SGLANG).draft_kind == r.MTP
    with pytest.raises(LayoutError, match="no classic-MTP draft"):
        layout_for(config, draft_method="mtp")


@pytest.mark.parametrize("prefix", ["model.layers.1.engram.wkv", "model.layers.0.self_attn.indexer.wq_b",
                                    "vision.blocks.0.attn.qkv_proj", "aligner.proj"])
def test_v41_only_modules_are_unknown(v41: dict[str, Path], prefix: str) -> None:
    config = json.loads((v41["s1-dspark"] / "config.json").read_text())
    choice = Sglang0523(config).builds(prefix, kind=r.LINEAR)
    assert choice.scheme.format == "unknown" and "V4.1-only" in choice.reason


def test_v4_indexer_weights_proj_is_built_without_the_quant_config(v41: dict[str, Path]) -> None:
    """layers/attention/dsv4/indexer.py ``C4Indexer``: ``weights_proj`` gets a quant config only
    when it is ``expert_pack``; under Fp8Config it is a BF16 linear, ``wq_b`` an FP8 one."""
    config = json.loads((_v4_copy(v41["s1-dspark"]) / "config.json").read_text())
    model = Sglang0523(config)
    assert not model.builds("model.layers.0.self_attn.indexer.weights_proj", kind=r.LINEAR).scheme.quantized
    assert model.builds("model.layers.0.self_attn.indexer.wq_b", kind=r.LINEAR).scheme.quantized


def test_route_engine_all_on_v41(v41: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["route", str(v41["s1-dspark"]), "--engine", "all"]) == 1
    out = capsys.readouterr().out
    assert "sglang-0.5.23: mxfp4 misrouted" in out and "unknown" not in out
