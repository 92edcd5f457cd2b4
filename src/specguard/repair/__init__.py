"""Repair (future ``specguard fix``): overlay checkpoints that stock engines load as stored.

Empty today. It sits beside lint (docs/architecture.md): it may use resolve,
engines and the stages below them, and the commands call it; it never writes
into the checkpoint it reads.
"""
