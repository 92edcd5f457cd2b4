"""Record SGLang 0.5.23's DeepSeek-V4 decisions into src/specguard/plans/sglang-0.5.23/ (one command).

    PYTHONPATH=.engines/sglang-0.5.23:.engines/triton-3.7.1 .venv/bin/python scripts/record_sglang.py [OUT_DIR]

Needs the overlays scripts/engines.sh installs (docs/engines.md). Writes the factory's
DeepSeek-V4 scenarios into a temporary folder, each config.json completed with the keys
the published DeepSeek-V4-Flash config has and the factory's tiny one lacks (SGLang's
ModelConfig reads them, e.g. sliding_window), and records every case in one process.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from specguard.engines.sglang.recorder import PLANS_DIR, dumps, record_all
from specguard.factory import write_scenario
from specguard.resolve import Resolver

PUBLISHED = Path(__file__).resolve().parents[1] / "tests/data/published/deepseek-v4-flash/config.json"
SCENARIOS = ("s1", "s1-dspark", "s3", "s8", "s8-nvfp4", "s6")


def _complete(config_path: Path, **quant: object) -> None:
    config = json.loads(config_path.read_text())
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


def _prefixes(path: Path) -> tuple[str, ...]:
    """The checkpoint's runtime prefixes as specguard's SGLang layout names them (layouts/sglang.py):
    what SGLang's own matching is asked about, so the record checks the layout and the matching."""
    return tuple(Resolver.open(path, engine="sglang-0.5.23").prefixes())


def cases(root: Path) -> dict[str, tuple[Path, str, tuple[str, ...]]]:
    """The checkpoints recorded: factory scenarios (DeepSeek-V4 S1, S1-DSpark, S3, S8;
    DeepSeek-V3 S8-NVFP4, S6), and S1 as a hybrid FP8+NVFP4 export
    (``quant_algo: MIXED_PRECISION``, ``group_size: 16``, as nvidia/DeepSeek-V4-Pro-NVFP4)."""
    out: dict[str, tuple[Path, str, tuple[str, ...]]] = {}
    for name in SCENARIOS:
        write_scenario(name, root / name)
        _complete(root / name / "config.json")
        out[name] = (root / name, "DSPARK" if "dspark" in name else "EAGLE", _prefixes(root / name))
    write_scenario("s1", root / "s1-hybrid")
    _complete(root / "s1-hybrid" / "config.json", quant_algo="MIXED_PRECISION", group_size=16, ignore=[])
    out["s1-hybrid"] = (root / "s1-hybrid", "EAGLE", _prefixes(root / "s1-hybrid"))
    return out


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else PLANS_DIR
    with tempfile.TemporaryDirectory() as tmp:
        recorded = record_all(cases(Path(tmp)))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "deepseek_v4.json").write_text(dumps(recorded))
    print(f"recorded in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
