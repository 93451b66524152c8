"""miner: mines verified environment-repair tasks from working projects."""

__version__ = "0.1.0"
