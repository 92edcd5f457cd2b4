"""SGLang: recorded decisions (recorder.py runs under the SGLang overlay only; docs/engines.md)."""
