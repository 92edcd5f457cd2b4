"""Every config change a finding prints, applied to the files and linted afresh,
fixes what it targets and changes nothing else (issue 12 item 2).

Independent of lint/fixes.py's own check: the edited config.json /
hf_quant_config.json are written beside links to the same shards and the copy
is opened, routed and linted from scratch (shards hard-linked, or copied across
file systems: specguard refuses symlinks that leave the directory).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from specguard.declared.edits import ConfigEdit, apply_all
from specguard.lint import lint
from specguard.resolve import OK, Resolver
from tests.lint.test_published_checkpoints import checkpoints, published  # noqa: F401  (fixture)

SCENARIOS = ["s1", "s1-dspark", "s1-u8", "s2", "s5"]


def _edited_copy(src: Path, dst: Path, edits: list[ConfigEdit]) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".safetensors" or f.name == "model.safetensors.index.json":
            try:
                os.link(f, dst / f.name)
            except OSError:
                shutil.copy(f, dst / f.name)
    config = json.loads((src / "config.json").read_text())
    hf_path = src / "hf_quant_config.json"
    hf = json.loads(hf_path.read_text()) if hf_path.exists() else None
    config, hf = apply_all(edits, config, hf)
    (dst / "config.json").write_text(json.dumps(config))
    if hf is not None:
        (dst / "hf_quant_config.json").write_text(json.dumps(hf))
    return dst


def _signatures(r: Resolver) -> dict[str, tuple]:
    return {rt.prefix: (rt.verdict, rt.stored and rt.stored.format, rt.declared and rt.declared.scheme.format,
                        rt.vllm and rt.vllm.method) for rt in r.routes()}


def _check_every_fix(path: Path, tmp: Path, **open_kw) -> int:
    before_r = Resolver.open(path, **open_kw)
    before = lint([before_r]).findings
    checked = 0
    for k, f in enumerate(before):
        d = f.as_dict()
        if not d["edits"] or d["applicability"] == "needs-reencode":  # a re-encode is `fix`'s to verify
            continue
        edits = [ConfigEdit(e["file"], tuple(e["path"]), e["op"], e["value"], e["index"]) for e in d["edits"]]
        copy = _edited_copy(path, tmp / f"fix{k}", edits)
        after_r = Resolver.open(copy, **open_kw)
        old, new = _signatures(before_r), _signatures(after_r)
        targets = {before_r.canonical(t) or t for t in d["targets"]}
        assert all(new[t][0] == OK for t in targets), (f.fix, {t: new[t] for t in targets})
        assert {p: v for p, v in new.items() if p not in targets} == {p: v for p, v in old.items() if p not in targets}
        after = lint([after_r]).findings  # (messages name the checkpoint: the copy's, read as the original)
        seen = {(g.code, g.message.replace(str(copy), str(path))) for g in after}
        assert seen < {(g.code, g.message) for g in before} or not after, (f.fix, [g.message for g in after])
        checked += 1
    return checked


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_printed_fix_reroutes_clean(scenarios, tmp_path, name):
    info = scenarios[name]
    kw = {"draft_method": "dspark"} if info.facts.get("draft_kind") == "dspark" else {}
    assert _check_every_fix(info.path, tmp_path, **kw) >= 1


def test_fix_on_cpu_is_not_a_config_change(scenarios):
    """On CPU the DeepSeek-V4 quant config reads no list that routes experts to MXFP4: the fix
    re-encodes them BF16 (exact) and excludes them, as `specguard fix --platform cpu` writes it."""
    r = Resolver.open(scenarios["s1"].path, platform="cpu")
    sg201 = next(f for f in lint([r]).findings if f.code == "SG201")
    assert sg201.fix is not None and sg201.fix.applicability == "needs-reencode"
    assert len(sg201.fix.reencode) == 12 and "re-encode 12 module(s) to BF16" in sg201.fix.message
    assert [e.as_dict() for e in sg201.fix.edits] == [{
        "file": "config.json", "path": ["quantization_config", "ignored_layers"], "op": "extend",
        "value": ["model.layers.2.ffn.experts"], "index": None}]


def test_fix_never_proposes_what_is_present(checkpoints, tmp_path):  # noqa: F811
    """Every edit changes the config (its 123 exclude_modules entries are not proposed again)."""
    r = Resolver.open(checkpoints["deepseek-r1-nvfp4"])
    cfg, hf = r.checkpoint.config, r.checkpoint.hf_quant_config
    edits = [e for f in lint([r]).findings for e in f.edits]
    assert all(apply_all([e], cfg, hf) != (dict(cfg or {}), dict(hf) if hf else None) for e in edits)
    assert not any(e.path[-1] in ("exclude_modules", "ignore") for e in edits)
