"""Record SGLang 0.5.23's decisions into src/specguard/plans/sglang-0.5.23/ (one command).

    PYTHONPATH=.engines/sglang-0.5.23:.engines/triton-3.7.1 .venv/bin/python scripts/record_sglang.py [OUT_DIR]

Needs the overlays scripts/engines.sh installs (docs/engines.md). Writes the factory's
DeepSeek-V4 scenarios into a temporary folder, each config.json completed with the keys
the published DeepSeek-V4-Flash config has and the factory's tiny one lacks (SGLang's
ModelConfig reads them, e.g. sliding_window), and the published GLM-4.7 NVFP4 copies
and Qwen3.8 FP8 copies (scripts/published_sparse.py, tests/data/published/SOURCES.md), and records every case in one
process: deepseek_v4.json (the factory's DeepSeek cases), glm4_moe.json (GLM-4-MoE NextN),
qwen3_5.json (Qwen3.5 MTP: the published Qwen3.8 FP8 copies and an NVFP4 export of it),
eagle.json (the published EAGLE-3 drafter of Llama-3.1-8B, alone and as an FP8 drafter whose
ignored_layers name vLLM's prefixes, before and after ``specguard fix --engine all``),
gpt_oss.json (gpt-oss-20b, Mxfp4Config), compressed_tensors.json (S2, GLM-4.5-Air FP8).
In the same start, S8-NVFP4's draft model is built by SGLang's loader and loaded (``LOADS``;
deepseek_v4.json ``model``), and each DSpark case's draft config parsed (``dspark``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

from specguard.engines.sglang.recorder import PLANS_DIR, dumps, record_all
from specguard.factory import write_scenario
from specguard.resolve import Resolver

PUBLISHED = Path(__file__).resolve().parents[1] / "tests/data/published/deepseek-v4-flash/config.json"
V3 = PUBLISHED.parents[1] / "deepseek-v3-fp8/config.json"
# cases whose draft model SGLang also builds and loads (recorder.py _load_facts): S8-NVFP4, a
# ModelOpt NVFP4 DeepSeek-V3 whose NextN layer stores NVFP4 MLP weights
LOADS = ("s8-nvfp4",)
SCENARIOS = ("s1", "s1-dspark", "s3", "s8", "s8-nvfp4", "s6")
# GLM-4-MoE NextN: the published GLM-4.7 NVFP4 copies, 4 main layers + the nextn layer
GLM = ("glm-4.7-nvfp4", "glm-4.7-nvfp4-mtp-not-excluded", "glm-4.7-nvfp4-mtp-excluded-by-checkpoint-names")
# Qwen3.5 MTP: the published Qwen3.8 FP8 copies and the NVFP4 export built from it, 4 main layers + mtp
QWEN = ("qwen3.8-2.4t-a95b-fp8", "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded",
        "qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16")
# A separate EAGLE-3 drafter (--speculative-draft-model-path) over its target, 4 target layers
EAGLE_TARGET, EAGLE = "llama-3.1-8b-fp8", ("eagle3-llama3.1-8b", "eagle3-fp8-vllm-names", "eagle3-fp8-vllm-names-fixed")
# gpt-oss (Mxfp4Config): the published gpt-oss-20b copy, 4 layers
OSS = ("gpt-oss-20b",)
# compressed-tensors with a NextN/MTP draft: the factory's S2 (DeepSeek-V4), Q0-CT and Q4-FC
# (Qwen3.6 dense W4A16) and the published GLM-4.5-Air FP8 copies (4 main layers + the nextn layer)
CT_SCENARIOS = ("s2", "q0-ct", "q4-fc")
GLM_AIR = ("glm-4.5-air-fp8", "glm-4.5-air-fp8-mtp-bf16-not-excluded", "glm-4.5-air-fp8-mtp-bf16-excluded")
# the BF16-graft copy with entries in SGLang's names, one per matching rule: an exact entry for the
# experts layer (SGLang asks its experts' names: matches nothing), a dotted suffix, a regex
SGLANG_NAMES = "glm-4.5-air-fp8-mtp-bf16-sglang-names"
SGLANG_NAMES_IGNORE = ["model.decoder.mlp.experts", "decoder.self_attn.o_proj", "re:model\\.decoder\\.mlp\\.shared_"]
CT = (*CT_SCENARIOS, *GLM_AIR, SGLANG_NAMES)
FILES = {"deepseek_v4.json": lambda case: case not in GLM + QWEN + EAGLE + OSS + CT,
         "glm4_moe.json": lambda case: case in GLM, "qwen3_5.json": lambda case: case in QWEN,
         "eagle.json": lambda case: case in EAGLE,
         "gpt_oss.json": lambda case: case in OSS, "compressed_tensors.json": lambda case: case in CT}


def _published():  # scripts/published_sparse.py, loaded by path (scripts/ is not a package)
    spec = importlib.util.spec_from_file_location("published_sparse", Path(__file__).with_name("published_sparse.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_sparse", module)
    spec.loader.exec_module(module)
    return module


def _complete(config_path: Path, v41: bool = False, **quant: object) -> None:
    config = json.loads(config_path.read_text())
    if v41:
        config.update(model_type="deepseek_v41", architectures=["DeepseekV41ForCausalLM"])
    published = json.loads(PUBLISHED.read_text())
    for key, value in published.items():
        if key != "quantization_config":  # an unquantized scenario (S8) stays unquantized
            config.setdefault(key, value)
    # Per-layer KV compression (0: none), which SGLang's ModelConfig reads and neither the
    # factory nor the assembled published copy carries; it does not enter a quant decision.
    layers = int(config["num_hidden_layers"]) + int(config.get("num_nextn_predict_layers") or 0)
    config.setdefault("compress_ratios", [0] * layers)
    if quant:
        config["quantization_config"] = {**config["quantization_config"], **quant}
    config_path.write_text(json.dumps(config, indent=1))


def _complete_rope(config_path: Path) -> None:
    config = json.loads(config_path.read_text())
    config.setdefault("rope_scaling", json.loads(V3.read_text())["rope_scaling"])
    config_path.write_text(json.dumps(config, indent=1))


def _prefixes(path: Path) -> tuple[str, ...]:
    """The checkpoint's runtime prefixes as specguard's SGLang layout names them (layouts/sglang.py):
    what SGLang's own matching is asked about, so the record checks the layout and the matching."""
    return tuple(Resolver.open(path, engine="sglang-0.5.23").prefixes())


def _fix_all(source: Path, out: Path, *draft: str) -> Path:
    """``specguard fix SOURCE [--draft D --draft-method eagle] --engine all --out OUT``: the
    repair every modelled engine loads as stored, so SGLang's own matching is asked about it."""
    from specguard.cli import main as cli

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli(["fix", str(source), *draft, "--engine", "all", "--out", str(out)])
    assert code in (0, 3) and out.is_dir(), f"specguard fix {source}: exit {code}"  # 3: an unmodelled target
    return out


def _eagle_cases(root: Path) -> dict[str, tuple[Path, str, tuple[str, ...]]]:
    """The published EAGLE-3 drafter; the same drafter (F16) under an FP8 config whose
    ignored_layers name vLLM's prefixes of it (``model.layers.{N}.self_attn.qkv_proj``, ...);
    and that one repaired with ``fix --engine all``."""
    published = _published()
    target = published.build(EAGLE_TARGET, root / EAGLE_TARGET, 4)
    plain = published.build(EAGLE[0], root / EAGLE[0])
    fp8 = root / EAGLE[1]
    shutil.copytree(plain, fp8)
    config = json.loads((fp8 / "config.json").read_text())
    n = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    config["quantization_config"] = {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
        "ignored_layers": ["model.fc", *(f"model.layers.{n}.{m}" for m in (
            "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"))]}
    (fp8 / "config.json").write_text(json.dumps(config, indent=1))
    fixed = _fix_all(target, root / "eagle-fixed", "--draft", str(fp8), "--draft-method", "eagle") / "drafter"
    out = {}
    for name, path in zip(EAGLE, (plain, fp8, fixed), strict=True):
        t = Resolver.open(target, engine="sglang-0.5.23", own_draft=False)
        drafter = Resolver.open(path, engine="sglang-0.5.23", target=t, draft_method="eagle")
        out[name] = (path, "EAGLE3", tuple(drafter.prefixes()))
    return out


def cases(root: Path) -> dict[str, tuple[Path, str, tuple[str, ...]]]:
    """The checkpoints recorded: factory scenarios (DeepSeek-V4 S1, S1-DSpark, S3, S8;
    DeepSeek-V3 S8-NVFP4, S6), and S1 as a hybrid FP8+NVFP4 export
    (``quant_algo: MIXED_PRECISION``, ``group_size: 16``, as nvidia/DeepSeek-V4-Pro-NVFP4)."""
    out: dict[str, tuple[Path, str, tuple[str, ...]]] = {}
    for name in SCENARIOS:
        write_scenario(name, root / name)
        _complete(root / name / "config.json")
        if name in LOADS:  # the published V3 rope_scaling, which SGLang's CPU rotary embedding needs
            _complete_rope(root / name / "config.json")
        out[name] = (root / name, "DSPARK" if "dspark" in name else "EAGLE", _prefixes(root / name))
    # DeepSeek-V4.1: the same checkpoints declared deepseek_v41 / DeepseekV41ForCausalLM (as the
    # vLLM tests declare V4.1); SGLang builds them with its V4 classes, DSpark or NextN by its own rule
    for name, base, algorithm in (("s1-dspark-v41", "s1-dspark", "DSPARK"), ("s3-v41", "s3", "EAGLE")):
        write_scenario(base, root / name)
        _complete(root / name / "config.json", v41=True)
        out[name] = (root / name, algorithm, _prefixes(root / name))
    write_scenario("s1", root / "s1-hybrid")
    _complete(root / "s1-hybrid" / "config.json", quant_algo="MIXED_PRECISION", group_size=16, ignore=[])
    out["s1-hybrid"] = (root / "s1-hybrid", "EAGLE", _prefixes(root / "s1-hybrid"))
    # S6-BF16 (a BF16 MTP layer under fp8 excluding nothing) and its `fix --engine all` repair
    write_scenario("s6-bf16", root / "s6-bf16")
    for name, path in (("s6-bf16", root / "s6-bf16"), ("s6-bf16-fixed", _fix_all(root / "s6-bf16", root / "s6f"))):
        out[name] = (path, "EAGLE", _prefixes(path))
    out.update(_eagle_cases(root))
    for name in CT_SCENARIOS:
        write_scenario(name, root / name)
        if name.startswith("s"):  # DeepSeek-V4
            _complete(root / name / "config.json")
        out[name] = (root / name, "EAGLE", _prefixes(root / name))
    published = _published()
    for name in (*GLM, *QWEN, *OSS, *GLM_AIR):
        path = published.build(name, root / name, 4)
        out[name] = (path, "EAGLE", _prefixes(path))
    out[SGLANG_NAMES] = (sglang_names(published, root), "EAGLE", _prefixes(root / SGLANG_NAMES))
    return out


def sglang_names(published, root: Path) -> Path:
    """GLM-4.5-Air FP8 with its BF16 nextn graft not excluded, plus ``SGLANG_NAMES_IGNORE``."""
    path = published.build("glm-4.5-air-fp8-mtp-bf16-not-excluded", root / SGLANG_NAMES, 4)
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"]["ignore"] += SGLANG_NAMES_IGNORE
    (path / "config.json").write_text(json.dumps(config, indent=1))
    return path


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else PLANS_DIR
    with tempfile.TemporaryDirectory() as tmp:
        recorded = record_all(cases(Path(tmp)), loads=LOADS)
    out_dir.mkdir(parents=True, exist_ok=True)
    for file, wanted in FILES.items():
        part = {**recorded, "cases": {k: v for k, v in recorded["cases"].items() if wanted(k)}}
        (out_dir / file).write_text(dumps(part))
    print(f"recorded in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
