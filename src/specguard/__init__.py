"""specguard: the disk is the truth, the config is a claim."""

__version__ = "0.1.0"
