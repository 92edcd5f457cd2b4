"""Training: the shipped model is real (beats unigram), and the script runs end to end."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from specguard.factory.models import Sizes
from specguard.refdecoder.corpus import (
    corpus_files,
    entropy_bits_per_byte,
    is_held_out,
    read_split,
    stdlib_dir,
    unigram_bits_per_byte,
)
from specguard.refdecoder.model import Transformer
from specguard.refdecoder.train import TrainConfig, train
from specguard.refdecoder.weights import load_weights


def bits_per_byte(model: Transformer, data: bytes, window: int = 256, n: int = 8) -> float:
    step = (len(data) - window - 1) // n
    rows = [list(data[i * step : i * step + window + 1]) for i in range(n)]
    tokens = torch.tensor(rows)
    with torch.no_grad():
        logits, _ = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item() / math.log(2)


def test_trained_model_beats_unigram_by_a_wide_margin(trained: Transformer, held_out: bytes) -> None:
    bpb = bits_per_byte(trained, held_out)
    # the empirical entropy of the very bytes scored: no unigram model does better
    assert bpb < 0.5 * entropy_bits_per_byte(held_out), bpb
    assert bpb < 2.0


def test_held_out_split_is_deterministic_and_disjoint() -> None:
    files = corpus_files(stdlib_dir())
    assert files == sorted(files) and len(files) > 100
    held = [f for f in files if is_held_out(f)]
    assert 0.02 < len(held) / len(files) < 0.10
    assert not any("site-packages" in f or f.startswith("test/") for f in files)


def test_unigram_baseline_is_a_real_cross_entropy() -> None:
    data = bytes(range(256)) * 4
    assert abs(unigram_bits_per_byte(data, data) - 8.0) < 1e-9
    assert abs(entropy_bits_per_byte(b"abab") - 1.0) < 1e-9


def small_corpus(dest: Path) -> Path:
    """A copy of 2 held-out and 10 training top-level stdlib files (split rule kept)."""
    root = stdlib_dir()
    top = [f for f in corpus_files(root) if "/" not in f]
    chosen = [f for f in top if is_held_out(f)][:2] + [f for f in top if not is_held_out(f)][:10]
    dest.mkdir()
    for rel in chosen:
        shutil.copyfile(root / rel, dest / rel)
    return dest


def test_train_script_runs_end_to_end_and_learns(tmp_path: Path) -> None:
    corpus = small_corpus(tmp_path / "corpus")
    train_bytes, held, _ = read_split(corpus)
    assert train_bytes and held
    mcfg = Sizes(hidden=128, layers=1, heads=2, experts=2, experts_per_token=1, moe_inter=128, max_seq_len=256)
    tcfg = TrainConfig(seq_len=64, batch_size=8, target_steps=30, mtp_steps=10, lr=1e-2,
                       warmup_steps=5, eval_every=30, eval_windows=8, spec_prompts=1)
    scores = train(corpus, tmp_path / "out", tcfg, mcfg, "cpu")
    assert scores["target_bpb"] < 7.0  # from ~8 bits at initialisation
    log = (tmp_path / "out" / "train_log.txt").read_text()
    assert "RESULT held-out bpb" in log and "per position" in log
    model = load_weights(tmp_path / "out" / "model.safetensors")
    assert model.cfg == mcfg
