"""Engine integrations (vLLM plugin, live-server probe)."""
