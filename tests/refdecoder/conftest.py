"""Fixtures for the engine's tests: the trained model, held-out prompts, one CPU thread."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
import torch

from specguard.refdecoder.corpus import held_out_sample
from specguard.refdecoder.model import Transformer
from specguard.refdecoder.weights import load_weights

if TYPE_CHECKING:
    from specguard.factory import ScenarioInfo
    from specguard.refdecoder.demo import PolicyResult


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # The model's matmuls are tiny: extra threads only add contention on a shared box.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def trained() -> Transformer:
    return load_weights()


@pytest.fixture(scope="session")
def held_out() -> bytes:
    """Held-out standard-library source of the Python running the tests."""
    return held_out_sample(max_bytes=256 * 1024)


@pytest.fixture(scope="session")
def prompts(held_out: bytes) -> list[list[int]]:
    """Six 48-byte prompts cut at evenly spaced line starts of held-out text."""
    out, step = [], len(held_out) // 6
    for i in range(6):
        start = held_out.index(b"\n", i * step) + 1
        out.append(list(held_out[start : start + 48]))
    return out


# ---------------------------------------- exports, the bf16 yardstick and the resolver's runs, once
# test_policies.py and test_fixed.py decode the same exports and compare with the same bf16 and
# resolver runs (tests/conftest.py keeps the two files in one worker); neither writes into them.
DECODE = {"new_tokens": 32, "k": 3}
# Plain greedy tokens by (target weights, prompt): a pure function of the two, decoded once. The
# policies load the same target (S1/S2/S4's NVFP4 experts hold the same values; S8 loads back the
# shipped BF16 weights bit for bit) and differ in their drafts, which only speculation reads.
_PLAIN: dict[tuple[str, tuple[int, ...]], list[int]] = {}


def _target_digest(model: Transformer) -> str:
    """SHA-256 of what a plain greedy decode reads: the sizes and every weight but the MTP block's
    (the sizes but the MTP block count too: S4's target, whose drafter is DSpark's, is S1's)."""
    h = hashlib.sha256(repr(replace(model.cfg, mtp_layers=0)).encode())
    for name, t in model.state_dict().items():
        if not name.startswith("mtp."):
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def decode_case(scenario: str, policy: str, infos: dict[str, ScenarioInfo],
                prompts: list[list[int]]) -> PolicyResult:
    """demo.run_case's acceptance and losslessness (speculative output against plain greedy decoding
    of the same target), with no timing: each distinct target's greedy decode runs once."""
    from specguard.refdecoder.demo import PolicyResult, load_case
    from specguard.refdecoder.policies import LoadFailure
    from specguard.refdecoder.specdec import Runner, SpecStats, cache_size

    try:
        loaded = load_case(scenario, policy, infos, "cpu")
    except LoadFailure as exc:
        return PolicyResult(scenario, policy, error=str(exc))
    k, new = DECODE["k"], DECODE["new_tokens"]
    runner = Runner(loaded.model, loaded.drafter, k, cache_size(max(map(len, prompts)), new, k))
    target, stats, identical = _target_digest(loaded.model), SpecStats(k), True
    for prompt in prompts:
        spec = runner.speculative(prompt, new)
        assert spec.stats is not None
        stats.merge(spec.stats)
        key = (target, tuple(prompt))
        if key not in _PLAIN:
            _PLAIN[key] = runner.greedy(prompt, new).tokens
        identical &= spec.tokens == _PLAIN[key]
    return PolicyResult(scenario, policy, stats, identical=identical, report=loaded.report,
                        routes=loaded.expert_routes)


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ScenarioInfo]:
    """S1, S2 and S4 exported from the trained model, plus S8 (all BF16) as the bf16 reference."""
    from specguard.refdecoder.demo import export_all

    return export_all(tmp_path_factory.mktemp("engine-export"), ["s1", "s2", "s4"])


@pytest.fixture(scope="session")
def decode_prompts() -> list[list[int]]:
    """Many short continuations: the policies' models then decode (nearly) the same text, so
    acceptance differences measure the drafters, not the text."""
    from specguard.refdecoder.demo import prompts_from_held_out

    return prompts_from_held_out(12, length=48)


@pytest.fixture(scope="session")
def bf16_runs(exports: dict[str, ScenarioInfo], decode_prompts: list[list[int]]) -> dict[str, PolicyResult]:
    """The bf16 policy decoding S1 (S8's checkpoint) and S4: the acceptance both files compare with."""
    torch.set_num_threads(1)
    return {s: decode_case(s, "bf16", exports, decode_prompts) for s in ("s1", "s4")}


@pytest.fixture(scope="session")
def resolver_runs(exports: dict[str, ScenarioInfo], decode_prompts: list[list[int]]) -> dict[str, PolicyResult]:
    """The resolver policy decoding S1, S2 and S4: test_policies measures it against bf16, and
    test_fixed finds `specguard fix`'s checkpoints load into these very weights."""
    torch.set_num_threads(1)
    return {s: decode_case(s, "resolver", exports, decode_prompts) for s in ("s1", "s2", "s4")}
