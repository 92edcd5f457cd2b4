"""Every answer specguard gives on every checkpoint the tests know, as one JSON file:
the before/after record of a change to what routing reads (a plan replacing a
hand-written model must leave it the same, or differ only where the engine's
source says the new answer is right).

    python scripts/outputs_snapshot.py OUT.json
    python scripts/outputs_snapshot.py --diff BEFORE.json AFTER.json

Covered: every factory scenario (its draft kind, and DeepSeek-V4 ones also as the
other draft kind), every published sparse copy (tests/data/published/, 4 layers;
the DSpark and EAGLE pairs as tests route them), every producer fixture
(tests/data/producers/); each under vLLM 0.33 on cuda/rocm/cpu, vLLM 0.32 and
SGLang 0.5.23. Per run: every route (prefix, role, kind, stored, declared, built,
verdict, reason) and every lint finding (code, message, modules, fix).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRODUCERS = ROOT / "tests" / "data" / "producers"
ENGINES = (("vllm-0.33", "cuda"), ("vllm-0.33", "rocm"), ("vllm-0.33", "cpu"), ("vllm-0.32", "cuda"),
           ("sglang-0.5.23", "cuda"))


def _published() -> Any:
    spec = importlib.util.spec_from_file_location("published_sparse", ROOT / "scripts" / "published_sparse.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_sparse", module)
    spec.loader.exec_module(module)
    return module


def _route(rt: Any) -> dict[str, Any]:
    v = rt.vllm
    return {"role": str(rt.role), "kind": str(rt.kind), "stored": rt.stored.short() if rt.stored else None,
            "declared": repr(rt.declared) if rt.declared else None,
            "built": None if v is None else [v.method, v.scheme.short(), v.reason, v.quant_config],
            "verdict": str(rt.verdict), "reason": rt.reason, "missing": list(rt.missing),
            "unmatched": list(rt.unmatched), "shards": list(rt.shards), "names": list(rt.checkpoint_names)}


def _run(open_: Callable[[str, str], list[Any]]) -> dict[str, Any]:
    from specguard.lint import lint

    out: dict[str, Any] = {}
    for engine, platform in ENGINES:
        key = f"{engine}/{platform}"
        try:
            resolvers = open_(engine, platform)
            routes = {f"{i}:{rt.prefix}": _route(rt) for i, r in enumerate(resolvers) for rt in r.routes()}
            findings = [f.as_dict() for f in lint(resolvers).findings]
            out[key] = {"routes": routes, "findings": findings}
        except Exception as exc:  # an engine that refuses the case is an answer too
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _cases(tmp: Path) -> Iterator[tuple[str, Callable[[str, str], list[Any]]]]:
    from specguard.factory import SCENARIOS, write_scenario
    from specguard.resolve import Resolver

    def opener(path: Path, method: str | None = None, drafter: Path | None = None,
               own_draft: bool | None = None) -> Callable[[str, str], list[Any]]:
        def open_(engine: str, platform: str) -> list[Any]:
            Resolver.clear_cache()
            if drafter is None:
                return [Resolver.open(path, draft_method=method, platform=platform, engine=engine,
                                      own_draft=own_draft)]
            t = Resolver.open(path, own_draft=False, platform=platform, engine=engine,
                              draft_method=method if method == "eagle" else None)
            return [t, Resolver.open(drafter, draft_method=method, target=t, platform=platform, engine=engine)]
        return open_

    for name in SCENARIOS:
        info = write_scenario(name, tmp / "scenarios" / name)
        method = info.facts.get("draft_kind")
        if info.drafter_path is not None:
            yield f"scenario/{name}", opener(info.path, method, info.drafter_path)
            continue
        yield f"scenario/{name}", opener(info.path, method if method == "dspark" else None)
        config = json.loads((info.path / "config.json").read_text())
        if str(config.get("model_type", "")).startswith("deepseek_v4"):
            for other in ("mtp", "dspark"):
                yield f"scenario/{name}@{other}", opener(info.path, other)
    published = _published()
    for name in published.MODELS:
        path = published.build(name, tmp / "published" / name, 4)
        yield f"published/{name}", opener(path)
        if "deepseek-v4" in name:
            for other in ("mtp", "dspark"):
                yield f"published/{name}@{other}", opener(path, other)
    eagle = tmp / "published" / "eagle3-llama3.1-8b"
    for target in ("llama-3.1-8b-fp8", "deepseek-v3-fp8"):
        yield f"published/{target}+eagle3", opener(tmp / "published" / target, "eagle", eagle)
    for fixture in sorted(p.name for p in PRODUCERS.iterdir() if (p / "config.json").exists()):
        yield f"producer/{fixture}", opener(PRODUCERS / fixture)


def snapshot(out: Path) -> None:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="specguard-snapshot-") as d:
        for name, open_ in _cases(Path(d)):
            result[name] = _run(open_)
            print(name, file=sys.stderr)
            result[name] = json.loads(json.dumps(result[name], default=str).replace(d, "<tmp>"))
    out.write_text(json.dumps(result, indent=1, sort_keys=True))


def _flat(obj: Any, at: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flat(v, f"{at}/{k}")
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        for i, v in enumerate(obj):
            yield from _flat(v, f"{at}[{i}]")
    else:
        yield at, obj


def diff(before: Path, after: Path) -> int:
    def load(path: Path) -> dict[str, Any]:  # a temporary directory's name is no difference
        text = re.sub(r"/[\w/.-]*/tests/data/", "<root>/tests/data/", path.read_text())
        return dict(_flat(json.loads(re.sub(r"/tmp/specguard-snapshot-\w+", "<tmp>", text))))

    a, b = load(before), load(after)
    n = 0
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            n += 1
            print(f"{key}\n  - {a.get(key, '<absent>')}\n  + {b.get(key, '<absent>')}")
    print(f"{n} difference(s)", file=sys.stderr)
    return 1 if n else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--diff", action="store_true", help="compare two snapshots")
    args = p.parse_args()
    if args.diff:
        return diff(*args.paths)
    snapshot(args.paths[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
