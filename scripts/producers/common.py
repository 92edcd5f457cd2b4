"""Shared pieces of the producer fixtures: the tiny model, calibration data,
the module list of the architecture and the expected.json writer.

The expected formats are derived from the recipe handed to each tool and the
architecture's module list below -- never from the headers the tool wrote --
so a disagreement between a fixture's expected.json and specguard's
classification is a finding, not something to paper over.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

SEED = 0
VOCAB = 64
SEQ_LEN = 32
N_SAMPLES = 16

# Qwen3-MoE, layer 0 dense (like DeepSeek's first_k_dense_replace), layer 1 MoE
# with four experts. Every reduction dim is a multiple of 128 so the stock
# group/block sizes (16, 32, 128, 128x128) all apply unchanged.
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=128,  # dense MLP of layer 0
    moe_intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    num_experts=4,
    num_experts_per_tok=2,
    mlp_only_layers=[0],
    max_position_embeddings=128,
    tie_word_embeddings=False,
)
# The same model with both MLPs dense, for a tool that cannot export the MoE.
TINY_DENSE = {**TINY, "mlp_only_layers": [0, 1]}

# Files copied from a tool's output into the fixture (tokenizer and
# generation_config are the in-memory stand-ins, not part of the ground truth).
KEEP = (
    "config.json", "hf_quant_config.json", "recipe.yaml", "quantization_config.json",
    "quant_config.json", "quanto_qmap.json", "model.safetensors", "model.safetensors.index.json",
)
BF16 = {"format": "bf16", "convention": "plain"}


def build_base(dirpath: Path, arch: dict[str, Any] = TINY) -> Path:
    """Random-init the tiny model from its config (no download) and save it as BF16."""
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    torch.manual_seed(SEED)
    cfg = Qwen3MoeConfig(**arch)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(dirpath)
    return dirpath


def load_base(dirpath: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(dirpath, dtype=torch.bfloat16)


def calib_ids() -> list[torch.Tensor]:
    """Calibration batches as token ids made in memory: N_SAMPLES x [1, SEQ_LEN]."""
    g = torch.Generator().manual_seed(SEED + 1)
    return [torch.randint(0, VOCAB, (1, SEQ_LEN), generator=g) for _ in range(N_SAMPLES)]


def tokenizer() -> Any:
    """A word-level tokenizer over the VOCAB ids, built in memory (the tools insist on one)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t1")


def arch_modules(arch: dict[str, Any] = TINY, fused_experts: bool = False) -> dict[str, str]:
    """Every checkpoint module of the architecture, mapped to the class a quantizer sees.

    Experts are listed per expert (``mlp.experts.E.gate_proj``), as the tools
    that linearise transformers' fused expert tensors (or transformers' own
    save, which reverses its weight conversion) write them back per expert.
    ``fused_experts``: the writer keeps transformers 5's fused
    ``Qwen3MoeExperts``: bare 3-D ``mlp.experts.gate_up_proj`` /
    ``mlp.experts.down_proj`` tensors, not nn.Linear): one module, ``mlp.experts``,
    whose parameters they are (the runtime prefix vLLM builds one layer for).
    """
    mods = {"model.embed_tokens": "Embedding", "model.norm": "RMSNorm", "lm_head": "Linear"}
    for i in range(arch["num_hidden_layers"]):
        p = f"model.layers.{i}"
        for n in ("input_layernorm", "post_attention_layernorm"):
            mods[f"{p}.{n}"] = "RMSNorm"
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mods[f"{p}.self_attn.{n}"] = "Linear"
        for n in ("q_norm", "k_norm"):
            mods[f"{p}.self_attn.{n}"] = "RMSNorm"
        if i in arch["mlp_only_layers"]:
            for n in ("gate_proj", "up_proj", "down_proj"):
                mods[f"{p}.mlp.{n}"] = "Linear"
            continue
        mods[f"{p}.mlp.gate"] = "Router"  # Qwen3MoeTopKRouter: a bare weight, not nn.Linear
        if fused_experts:
            mods[f"{p}.mlp.experts"] = "FusedExperts"
            continue
        for e in range(arch["num_experts"]):
            for n in ("gate_proj", "up_proj", "down_proj"):
                mods[f"{p}.mlp.experts.{e}.{n}"] = "Linear"
    return mods


def entry(fmt: str, convention: str, group_size: int | None = None,
          block: list[int] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"format": fmt, "convention": convention}
    if group_size is not None:
        e["group_size"] = group_size
    if block is not None:
        e["block"] = block
    return e


def versions(*dists: str) -> dict[str, str]:
    out = {}
    for d in ("torch", "transformers", *dists):
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            out[d] = "absent"
    return out


def write_fixture(src: Path, dest: Path, expected: dict[str, Any]) -> None:
    """Copy the tool's ground-truth files and write expected.json next to them."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    found = False
    for name in KEEP:
        if (src / name).exists():
            shutil.copyfile(src / name, dest / name)
            found = found or name.startswith("model.safetensors")
    for shard in sorted(src.glob("model-*.safetensors")):
        shutil.copyfile(shard, dest / shard.name)
        found = True
    if not found:
        raise RuntimeError(f"{src}: the tool wrote no safetensors file")
    (dest / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=False) + "\n")


def write_reference(dest: Path, tensors: dict[str, torch.Tensor], how: str) -> None:
    """The producer's own dequantization of a few modules, for the codec tests.

    Stored in a subfolder (``reference/dequantized.safetensors``) so the
    checkpoint itself stays exactly what the tool wrote; ``how`` names the
    producer function that computed it (kept in the file's metadata).
    """
    from safetensors.torch import save_file

    (dest / "reference").mkdir(exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()},
              dest / "reference" / "dequantized.safetensors", metadata={"how": how})


def workdir() -> Path:
    """A scratch directory for the base model and the tool's raw output, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="specguard-producer-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
