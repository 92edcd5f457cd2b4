#!/usr/bin/env python3
"""Train the reference speculative-decoding model (see specguard.engine.train).

Reproduces src/specguard/data/engine/: run from the repository root, e.g.
    PYTHONPATH=src python3 scripts/train_engine.py --out src/specguard/data/engine
"""

import sys

from specguard.engine.train import main

if __name__ == "__main__":
    sys.exit(main())
