"""Speculative decoding on the trained model: lossless, vLLM's metrics, real acceptance."""

from __future__ import annotations

import pytest
import torch

from specguard.refdecoder.model import Transformer
from specguard.refdecoder.specdec import (
    DSparkDraft,
    MTPDrafter,
    Runner,
    SpecStats,
    cache_size,
    greedy_generate,
    speculative_generate,
)
from specguard.refdecoder.weights import load_dspark, load_weights

NEW = 24


@pytest.fixture(scope="module")
def plain(trained: Transformer, prompts: list[list[int]]) -> list[list[int]]:
    """Plain greedy decoding of the first three prompts: the reference every lossless check compares with."""
    torch.set_num_threads(1)  # set up before conftest's one_thread
    return [greedy_generate(trained, prompt, NEW).tokens for prompt in prompts[:3]]


@pytest.fixture(scope="module")
def k3_stats(trained: Transformer, prompts: list[list[int]]) -> SpecStats:
    """The trained MTP block drafting k = 3 over every prompt, merged."""
    torch.set_num_threads(1)
    stats = SpecStats(3)
    for prompt in prompts:
        s = speculative_generate(trained, prompt, NEW, k=3).stats
        assert s is not None
        stats.merge(s)
    return stats


@pytest.mark.parametrize("k", [1, 3, 5])
def test_output_identical_to_plain_greedy(
    trained: Transformer, prompts: list[list[int]], plain: list[list[int]], k: int
) -> None:
    for prompt, want in zip(prompts[:3], plain, strict=True):
        spec = speculative_generate(trained, prompt, NEW, k=k)
        assert spec.tokens == want
        assert spec.stats is not None and spec.stats.num_accepted_tokens > 0


def test_runner_reused_across_prompts_matches_one_off_runs(
    trained: Transformer, prompts: list[list[int]]
) -> None:
    # static buffers carry state between runs: a reused runner must reset all of it
    runner = Runner(trained, MTPDrafter(trained), 3, cache_size(max(map(len, prompts)), NEW, 3))
    for prompt in (prompts[0], prompts[1][:20], prompts[0]):
        spec, plain = runner.speculative(prompt, NEW), runner.greedy(prompt, NEW)
        once = speculative_generate(trained, prompt, NEW, k=3)
        assert spec.tokens == plain.tokens == once.tokens
        assert spec.stats is not None and once.stats is not None
        assert spec.stats.accepted_per_pos == once.stats.accepted_per_pos


def test_separate_dspark_drafter_is_lossless_and_accepted(
    trained: Transformer, prompts: list[list[int]], plain: list[list[int]]
) -> None:
    drafter = DSparkDraft(trained, load_dspark())
    stats = SpecStats(3)
    for prompt, want in zip(prompts[:3], plain, strict=True):
        spec = speculative_generate(trained, prompt, NEW, k=3, drafter=drafter)
        assert spec.tokens == want
        assert spec.stats is not None
        stats.merge(spec.stats)
    assert stats.per_position_rate[0] >= 0.40


def test_lossless_even_with_a_garbage_drafter(prompts: list[list[int]]) -> None:
    model = load_weights()
    with torch.no_grad():
        for name, p in model.mtp.named_parameters():
            if "experts" in name:
                p.fill_(float("nan"))  # what never-written scales do to a drafter
    prompt = prompts[0]
    spec = speculative_generate(model, prompt, NEW, k=3)
    assert spec.tokens == greedy_generate(model, prompt, NEW).tokens
    assert spec.stats is not None and spec.stats.num_accepted_tokens == 0


def test_metrics_follow_vllm_definitions(k3_stats: SpecStats) -> None:
    stats = k3_stats
    assert stats.num_draft_tokens == 3 * stats.num_drafts
    assert stats.num_accepted_tokens == sum(stats.accepted_per_pos)
    rates = stats.per_position_rate
    assert rates == sorted(rates, reverse=True)  # a position is accepted only after the earlier ones
    assert stats.acceptance_rate == pytest.approx(stats.num_accepted_tokens / stats.num_draft_tokens)
    assert stats.mean_acceptance_length == pytest.approx(1 + sum(rates))


def test_trained_mtp_position0_acceptance_at_least_40_percent(k3_stats: SpecStats) -> None:
    assert k3_stats.per_position_rate[0] >= 0.40, k3_stats


def test_rejects_bad_arguments(trained: Transformer) -> None:
    with pytest.raises(ValueError, match="k must be"):
        speculative_generate(trained, [65], 4, k=0)
    with pytest.raises(ValueError, match="max_seq_len"):
        greedy_generate(trained, [65] * trained.cfg.max_seq_len, 4)
    with pytest.raises(ValueError, match="at least one token"):
        greedy_generate(trained, [], 4)
