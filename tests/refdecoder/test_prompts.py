"""The held-out prompts ship with the weights: the same text on every machine,
whatever Python's standard library is there, and every result names them by hash."""

from __future__ import annotations

import hashlib

from specguard.refdecoder import corpus
from specguard.refdecoder.demo import prompts_from_held_out

# benchmarks/results/specdec*.txt and the README were measured on these prompts
BENCHMARK_PROMPTS = "55dffe1c438a8efa"  # 8 prompts of 64 bytes


def test_the_shipped_split_is_the_training_runs_held_out_text():
    text = corpus.packaged_held_out()
    assert hashlib.sha256(text).hexdigest() == corpus.HELD_OUT_SHA256
    log = (corpus.resources.files("specguard") / "data" / "refdecoder" / "train_log.txt").read_text()
    assert f"held-out {len(text)} B sha256 {corpus.HELD_OUT_SHA256[:16]}" in log


def test_prompts_do_not_depend_on_the_hosts_standard_library(tmp_path, monkeypatch):
    (tmp_path / "other.py").write_text("print('another Python')\n" * 1000)
    monkeypatch.setattr(corpus, "stdlib_dir", lambda: tmp_path)
    prompts = prompts_from_held_out(8)
    assert corpus.prompts_sha256(prompts) == BENCHMARK_PROMPTS
    assert all(len(p) == 64 for p in prompts)

