"""Issue 19: the four Qwen3.5/3.6 MTP shapes, each found with what vLLM 0.33 does and the
exact fix, and the fix applied to a copy of the checkpoint lints clean."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specguard.lint import lint
from specguard.resolve import Resolver
from tests.conftest import resolvers_for


def _findings(path: Path, code: str | None = None):
    Resolver.clear_cache()
    found = lint([Resolver.open(path)]).findings
    return [f for f in found if code is None or f.code == code]


def _copy(info, tmp_path: Path) -> Path:
    dst = tmp_path / info.name
    shutil.copytree(info.path, dst)
    return dst


def test_positive_rule_over_bf16_draft_experts(scenarios, tmp_path):
    q1 = scenarios["q1"]
    (f,) = [f for f in lint(resolvers_for(q1)).findings if f.code == "SG203"]
    assert "fails to start" in f.message and "'+:.*mtp.*'" in f.message
    assert set(f.modules) == {m for m, e in q1.expected.items() if e.role == "draft" and ".experts." in m}
    assert list(f.data["dynamic"]) == ["-:.*mtp.*", "-:.*attn.*", "-:.*shared_expert.*"]
    fixed = _copy(q1, tmp_path)
    cfg = json.loads((fixed / "config.json").read_text())
    cfg["quantization_config"]["dynamic"] = f.data["dynamic"]
    (fixed / "config.json").write_text(json.dumps(cfg))
    assert _findings(fixed) == []


def test_dense_positive_rule_is_harmless_without_a_module_list(scenarios):
    """vLLM 0.33 quantizes a linear only if a quantized tensor names it (maybe_update_config):
    the BF16 MTP linears stay unquantized whatever '+:.*mtp.*' says. No false alarm."""
    assert lint(resolvers_for(scenarios["q1-dense"])).findings == ()
    (f,) = lint(resolvers_for(scenarios["q1-listed"])).findings
    assert {m.rsplit(".", 1)[-1] for m in f.modules} == {"gate_proj", "up_proj", "down_proj"}


def test_draft_file_outside_the_index(scenarios, tmp_path):
    q2 = scenarios["q2"]
    (f,) = [f for f in lint(resolvers_for(q2)).findings if f.code == "SG303"]
    drafts = {n for n in q2.tensors if n.startswith("mtp.")}
    assert set(f.modules) == drafts and f.data["files"] == ["model_extra_tensors.safetensors"]
    assert f.data["loader"] == "unwritten" and "torch.empty" in f.message
    fixed = _copy(q2, tmp_path)
    index = json.loads((fixed / "model.safetensors.index.json").read_text())
    index["weight_map"].update({n: "model_extra_tensors.safetensors" for n in f.modules})
    index["metadata"]["total_size"] += f.data["bytes"]
    (fixed / "model.safetensors.index.json").write_text(json.dumps(index))
    assert _findings(fixed) == []


def test_stored_truth_of_the_unindexed_drafter_is_read(scenarios):
    q2 = scenarios["q2"]
    r = resolvers_for(q2)[0]
    assert set(r.checkpoint.outside_index) == {n for n in q2.tensors if n.startswith("mtp.")}
    assert r.route("mtp.layers.0.mlp.experts").stored.format == "bf16"
    assert r.route("mtp.layers.0.mlp.experts").verdict == "ok"


def test_expert_index_after_the_projection(scenarios):
    q3 = scenarios["q3"]
    (f,) = lint(resolvers_for(q3)).findings
    assert f.code == "SG702" and "fails to start" in f.message
    assert all(".experts.down_proj." in n for n in f.data["fails"])
    assert {n.split(".experts.")[1].split(".")[0] for n in f.data["skipped"]} == {"gate_proj", "up_proj"}
    # g_idx is dropped by vLLM's loader before the layer sees it (get_checkpoint_weight_mapper)
    assert len(f.modules) == sum(len([t for t in e.tensors if t != "g_idx"]) for m, e in q3.expected.items()
                                 if ".experts." in m and m.startswith("mtp."))


def test_hybrid_fp8_drafter_under_gptq(scenarios):
    found = lint(resolvers_for(scenarios["q4"])).findings
    assert {f.code for f in found} == {"SG204"}
    assert all("fails to start" in f.message and "dequantize" in str(f.fix) for f in found)
    named = {m for f in found for m in f.modules}
    assert named == {m for m, e in scenarios["q4"].expected.items() if e.role == "draft" and e.quantized}


@pytest.mark.parametrize("name", ["q4-fc", "q0-ct"])
def test_bf16_mtp_fc_under_compressed_tensors(scenarios, name):
    found = lint(resolvers_for(scenarios[name])).findings
    if name == "q0-ct":
        assert found == ()
    else:
        (f,) = found
        assert f.code == "SG203" and f.modules == ("mtp.fc",)
