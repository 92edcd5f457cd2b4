"""One question, one answer (issue 24 item 1): `specguard inspect --json` shows every module
stored as `specguard route` settles it, on every factory scenario (tiny, and the sizes
whose FP8 weights are one block), every published copy and every producer fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.factory import write_scenario
from specguard.resolve import Resolver
from tests.conftest import resolvers_for
from tests.lint.test_published_checkpoints import checkpoints, published  # noqa: F401  (fixture)

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"


def _inspected(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple]:
    assert main(["inspect", str(path), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["records"]
    return {r["module"]: (r["format"], r["convention"], r["block"] and tuple(r["block"])) for r in records}


def _routed(resolvers: list[Resolver]) -> dict[str, tuple]:
    """Each checkpoint module's stored scheme as its route settles it (mixed groups left out)."""
    out = {}
    for r in resolvers:
        for rt in r.routes():
            if rt.stored is None or rt.stored.format == "mixed":
                continue
            for name in rt.checkpoint_names:
                out[(r.checkpoint.root, name)] = (rt.stored.format, rt.stored.convention,
                                                  rt.stored.block and tuple(rt.stored.block))
    return out


def _disagree(resolvers: list[Resolver], capsys: pytest.CaptureFixture[str]) -> dict:
    """Modules whose scheme differs, and modules one command names that the other does not
    (transformers 5 stacked experts and gpt-oss experts: one module name in both)."""
    routed = _routed(resolvers)
    wrong = {}
    for r in resolvers:
        assert r.checkpoint.root is not None
        shown = _inspected(r.checkpoint.root, capsys)
        for (root, name), want in routed.items():
            if root == r.checkpoint.root and shown.get(name) != want:
                wrong[name] = (shown.get(name), want)
        named = {n for rt in r.routes() for n in rt.checkpoint_names}
        wrong.update({name: ("inspect only", None) for name in set(shown) - named})
    return wrong


def test_every_scenario(scenarios, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {name: w for name, info in scenarios.items() if (w := _disagree(resolvers_for(info), capsys))}
    assert not wrong


@pytest.mark.parametrize("name", ["s3-fp8", "s2"])
def test_fp8_weight_of_one_block(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 128x128 FP8 weight with a [1, 1] scale under weight_block_size [128, 128]: fp8_block in both."""
    info = write_scenario(name, tmp_path / name, size="one-block")
    resolvers = resolvers_for(info)
    assert not _disagree(resolvers, capsys)
    shown = _inspected(info.path, capsys)
    assert any(fmt == "fp8_block" and block == (128, 128) for fmt, _, block in shown.values())
    assert not any(fmt == "fp8_tensor" for fmt, _, _ in shown.values())


def test_every_published_copy(checkpoints, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    wrong = {name: w for name, path in checkpoints.items() if (w := _disagree([Resolver.open(path)], capsys))}
    assert not wrong


@pytest.mark.parametrize("name", sorted(p.name for p in PRODUCERS.iterdir() if (p / "config.json").is_file()))
def test_every_producer_fixture(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not _disagree([Resolver.open(PRODUCERS / name)], capsys)


def test_fused_experts_are_one_module_in_both(capsys: pytest.CaptureFixture[str]) -> None:
    """transformers 5 stacked experts (3-D ``mlp.experts.gate_up_proj``, no ``.weight``) are
    the module ``mlp.experts`` in inspect, as route places them."""
    path = PRODUCERS / "quark_int8"
    shown = _inspected(path, capsys)
    assert "model.layers.1.mlp.experts" in shown
    assert not any(m.endswith(("experts.gate_up_proj", "experts.down_proj")) for m in shown)
    rt = Resolver.open(path).route("model.layers.1.mlp.experts")
    assert rt.checkpoint_names == ("model.layers.1.mlp.experts",)
