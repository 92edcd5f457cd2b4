"""The limits of a remote audit (hubhttp.py, docs/remote.md "Limits"): their defaults and
environment variables. A module of its own: a replayed audit reads the request limit for
its one HEAD (revision.py) without importing hubhttp and its threads."""

from __future__ import annotations

import math
import os
from typing import NamedTuple

from specguard.errors import UsageError

# Defaults; each is overridden by its environment variable (seconds).
REQUEST_TIMEOUT = 30.0  # SPECGUARD_REMOTE_TIMEOUT: one request, from connect to its last byte
AUDIT_TIMEOUT = 120.0  # SPECGUARD_REMOTE_DEADLINE: the whole audit, retries and waits included
RETRY_WAIT = 30.0  # SPECGUARD_REMOTE_RETRY_WAIT: time spent waiting before retries, in all
ENV = {"request": "SPECGUARD_REMOTE_TIMEOUT", "audit": "SPECGUARD_REMOTE_DEADLINE",
       "retry_wait": "SPECGUARD_REMOTE_RETRY_WAIT"}


class Limits(NamedTuple):  # not a dataclass: a replayed audit imports this module, not dataclasses
    request: float = REQUEST_TIMEOUT
    audit: float = AUDIT_TIMEOUT
    retry_wait: float = RETRY_WAIT

    @classmethod
    def from_env(cls) -> Limits:
        values: dict[str, float] = {}
        for name, var in ENV.items():
            raw = os.environ.get(var)
            if raw is None or raw == "":
                continue
            try:
                values[name] = float(raw)
            except ValueError:
                values[name] = math.nan
            if not values[name] >= 0 or values[name] == math.inf:
                raise UsageError(f"{var}={raw[:40]!r}: not a number of seconds")
        return cls(**values)
