"""specguard's vLLM plugin: build every module in the format it is stored in.

Installed with ``pip install specguard[vllm]``; vLLM finds ``register`` through
the ``vllm.general_plugins`` entry point and calls it once in every process
(API server, engine core, each worker). Importing this package is cheap: the
patches are applied when vLLM imports the modules they change.
"""

from specguard.integrations.vllm.plugin import active, install, installed, register, uninstall

__all__ = ["active", "install", "installed", "register", "uninstall"]
