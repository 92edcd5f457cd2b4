"""The reference model: DeepSeek-V4 native names, cache == recompute, sizes checked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from specguard.factory.models import Sizes
from specguard.refdecoder.model import TRAINED, DSparkDrafter, Transformer, sizes_from_json, sizes_json

TINY = Sizes(hidden=128, layers=2, experts=4, max_seq_len=64)


def test_state_dict_uses_deepseek_v4_native_names() -> None:
    names = set(Transformer(TINY).state_dict())
    for name in [
        "embed.weight", "head.weight", "norm.weight",
        "layers.0.attn_norm.weight", "layers.0.attn.wq_a.weight", "layers.0.attn.q_norm.weight",
        "layers.0.attn.wq_b.weight", "layers.0.attn.wkv.weight", "layers.0.attn.kv_norm.weight",
        "layers.1.attn.wo_a.weight", "layers.1.attn.wo_b.weight",
        "layers.0.ffn_norm.weight", "layers.0.ffn.gate.weight", "layers.0.ffn.gate.bias",
        "layers.1.ffn.experts.3.w1.weight", "layers.1.ffn.experts.3.w2.weight",
        "layers.1.ffn.experts.3.w3.weight", "layers.0.ffn.shared_experts.w1.weight",
        "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.e_proj.weight", "mtp.0.h_proj.weight",
        "mtp.0.attn.wq_a.weight", "mtp.0.ffn.gate.weight", "mtp.0.ffn.experts.0.w1.weight",
        "mtp.0.ffn.shared_experts.w2.weight", "mtp.0.norm.weight",
    ]:
        assert name in names, name
    assert not any(n.startswith("rope") for n in names)  # tables are rebuilt, not stored
    assert not any(n.startswith("mtp.0.head") or n.startswith("mtp.0.embed") for n in names)


def test_quantized_linears_keep_format_divisibility() -> None:
    model = Transformer(TRAINED)
    for name, t in model.state_dict().items():
        if t.dim() == 2 and not name.startswith(("embed", "head")) and "gate" not in name:
            assert t.shape[0] % 128 == 0 and t.shape[1] % 128 == 0, name  # FP8 block 128
    with pytest.raises(ValueError, match="multiple of 128"):
        Transformer(replace(TRAINED, hidden=160))


def test_one_dataclass_of_model_sizes_for_factory_and_decoder() -> None:
    """Issue 24 item 7: the factory's Sizes are the decoder's config (no second dataclass), and
    the weights' metadata keeps DeepSeek ModelArgs names both ways (the shipped weights hold them)."""
    import specguard.refdecoder.model as model

    assert not [n for n, v in vars(model).items() if isinstance(v, type) and "Config" in n]
    assert sizes_from_json(sizes_json(TINY)) == TINY
    shipped = json.loads(sizes_json(TRAINED))
    assert shipped["dim"] == 256 and shipped["n_shared_experts"] == 1 and shipped["n_layers"] == 12


def test_cached_decoding_matches_full_recompute() -> None:
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    tokens = torch.randint(0, 256, (1, 20))
    with torch.no_grad():
        full_logits, full_hidden = model(tokens)
        full_mtp, _ = model.mtp_forward(full_hidden[:, :-1], tokens[:, 1:])
        caches, mtp_cache = model.new_caches(), model.new_caches(1)[0]
        # prefill 12, then 3 + 5 positions (a verification-sized chunk and a longer one)
        pieces = [model(tokens[:, a:b], caches) for a, b in ((0, 12), (12, 15), (15, 20))]
        hidden = torch.cat([h for _, h in pieces], dim=1)
        mtp = [model.mtp_forward(hidden[:, a:b], tokens[:, a + 1 : b + 1], mtp_cache)[0]
               for a, b in ((0, 7), (7, 19))]
    torch.testing.assert_close(torch.cat([lg for lg, _ in pieces], dim=1), full_logits)
    torch.testing.assert_close(hidden, full_hidden)
    torch.testing.assert_close(torch.cat(mtp, dim=1), full_mtp)


def test_cache_rollback_overwrites_rejected_positions() -> None:
    torch.manual_seed(1)
    model = Transformer(TINY).eval()
    a, b = torch.randint(0, 256, (1, 10)), torch.randint(0, 256, (1, 4))
    with torch.no_grad():
        caches = model.new_caches()
        model(a, caches)
        model(torch.randint(0, 256, (1, 4)), caches)  # rejected drafts
        for c in caches:
            c.length = 10
        rolled, _ = model(b, caches)
        fresh, _ = model(torch.cat([a, b], dim=1))
    torch.testing.assert_close(rolled, fresh[:, 10:])


def test_dspark_drafter_uses_dspark_checkpoint_names() -> None:
    names = set(DSparkDrafter(TINY, n_stages=3).state_dict())
    assert {"mtp.0.main_proj.weight", "mtp.0.main_norm.weight", "mtp.2.norm.weight",
            "mtp.1.ffn.experts.0.w1.weight", "mtp.2.attn.wkv.weight"} <= names
    assert not any(n.startswith(("mtp.0.norm", "mtp.1.norm", "mtp.0.e_proj", "embed", "head")) for n in names)


def test_dspark_cached_block_drafting_matches_full_recompute() -> None:
    # the decode path (context written into static caches, then one query block)
    # computes what the training path computes for the same anchors
    torch.manual_seed(2)
    model, drafter = Transformer(TINY).eval(), DSparkDrafter(TINY, n_stages=2).eval()
    tokens = torch.randint(1, 256, (1, 14))
    anchors = torch.tensor([5, 9])
    with torch.no_grad():
        _, feats = model(tokens, capture=drafter.target_layers)
        assert feats.shape[-1] == 2 * TINY.hidden
        full = drafter(model, feats, tokens, anchors, block=3)  # [1, 2, 3, V]
        caches = model.new_caches(2)
        parts, done = [], 0
        for a in anchors.tolist():
            # context up to the anchor, written over the previous block's slots
            drafter.write_context(model, feats[:, done:a], torch.arange(done, a), caches)
            parts.append(drafter.draft(model, tokens[0, a : a + 1], torch.arange(a, a + 3), caches))
            done = a
    torch.testing.assert_close(torch.stack(parts, dim=1), full)


def test_dspark_block_sees_no_context_at_or_after_its_anchor() -> None:
    torch.manual_seed(3)
    model, drafter = Transformer(TINY).eval(), DSparkDrafter(TINY, n_stages=2).eval()
    tokens = torch.randint(1, 256, (1, 12))
    with torch.no_grad():
        _, feats = model(tokens, capture=drafter.target_layers)
        before = drafter(model, feats, tokens, torch.tensor([6]), block=3)
        feats[:, 6:] = torch.randn_like(feats[:, 6:])  # later target states: not yet verified
        after = drafter(model, feats, tokens, torch.tensor([6]), block=3)
    torch.testing.assert_close(before, after)
