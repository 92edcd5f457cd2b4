"""The plugin at tensor-parallel size 2: two processes, two gloo ranks, vLLM 0.33's real classes.

Each rank builds S1's MTP draft (its experts split over the ranks as vLLM splits them) and loads
its share of the checkpoint through vLLM's own loader (tests/integrations/tp_rank.py). With the
plugin every rank routes the draft experts as stored (MXFP4) and LoadGuard is clean on every
rank; without it every rank builds NVFP4 and leaves the per-tensor scales unwritten.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integrations import fresh_vllm

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2


def run_ranks(ckpt: Path, tmp: Path) -> list[dict]:
    """Both ranks at once, each a process of its own (children of the worker's one vLLM start,
    tests/integrations/fresh_vllm.py), meeting through gloo's file store."""
    store = tmp / "gloo"
    env = fresh_vllm.fresh_env(VLLM_PLUGINS="", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    jobs = [fresh_vllm.Job(env=env, module="tests.integrations.tp_rank", argv=(str(r), str(WORLD), str(store),
                                                                              str(ckpt)))
            for r in range(WORLD)]
    out = []
    for done in fresh_vllm.run(jobs, timeout=900):
        assert done.returncode == 0, done.stderr[-4000:]
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        out.append(json.loads(line[len("RESULT "):]))
    return sorted(out, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def ranks(s1_dir: Path, tmp_path_factory) -> list[dict]:
    return run_ranks(s1_dir, tmp_path_factory.mktemp("tp2"))


@pytest.fixture(scope="module")
def plugin_ranks(ranks: list[dict]) -> list[dict]:
    return [r["plugin"] for r in ranks]


def test_every_rank_routes_the_draft_experts_as_stored(plugin_ranks: list[dict]) -> None:
    assert [r["method"] for r in plugin_ranks] == ["Mxfp4MoEMethod"] * WORLD
    for r in plugin_ranks:
        assert r["decisions"] == ["model.layers.2.ffn.experts:mxfp4"]


def test_every_rank_loads_its_slice_and_leaves_nothing_unwritten(plugin_ranks: list[dict]) -> None:
    assert [r["guard"] for r in plugin_ranks] == ["clean"] * WORLD
    assert all(r["slices_equal"] for r in plugin_ranks)
    # the intermediate dimension is split over the ranks: half of what one rank holds at TP=1
    from specguard import factory

    inter = factory.SIZES["tiny"].moe_inter
    for r in plugin_ranks:
        assert r["shapes"]["w13_weight"][1] == 2 * inter // WORLD
        assert r["shapes"]["w2_weight"][2] == inter // WORLD // 2


def test_without_the_plugin_every_rank_builds_nvfp4_and_leaves_scales_unwritten(ranks: list[dict]) -> None:
    assert [r["vllm"]["method"] for r in ranks] == ["ModelOptNvFp4FusedMoE"] * WORLD
    for r in ranks:
        assert any(n.endswith("w13_weight_scale_2") for n in r["vllm"]["guard"])
