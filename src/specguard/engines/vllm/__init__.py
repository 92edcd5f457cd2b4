"""Models of vLLM versions, one module per version (``v0_33``)."""
