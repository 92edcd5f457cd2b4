"""Output shared by the commands: JSON records, byte sizes (the console: ``specguard.terminal``)."""

from __future__ import annotations

import json
import sys

JSON_SCHEMA_VERSION = 1  # inspect --json (docs/json.md)
ROUTE_SCHEMA_VERSION = 2  # route --json: 2 since records carry ``engine`` (one per module per engine)


def write_json(checkpoint: str, records: list[dict], schema: int = JSON_SCHEMA_VERSION) -> None:
    """Valid JSON with one record per line: greppable and diffable."""
    head = json.dumps({"schema": schema, "checkpoint": checkpoint})[:-1]
    sys.stdout.write(head + ', "records": [\n')
    sys.stdout.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in records))
    sys.stdout.write("\n]}\n")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
