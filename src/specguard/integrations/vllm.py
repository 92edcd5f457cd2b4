"""vLLM plugin entry point (filled in by the vLLM plugin issue)."""


def register() -> None:
    """vllm.general_plugins entry point; a no-op until the plugin lands."""
