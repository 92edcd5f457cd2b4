#!/usr/bin/env python3
"""Train the reference speculative-decoding model (see specguard.refdecoder.train).

Reproduces src/specguard/data/refdecoder/: run from the repository root, e.g.
    PYTHONPATH=src python3 scripts/train_engine.py --out src/specguard/data/refdecoder
"""

import sys

from specguard.refdecoder.train import main

if __name__ == "__main__":
    sys.exit(main())
