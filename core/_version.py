"""deck's version, kept apart so `deck --version` imports nothing else."""

__version__ = "0.1.0"
