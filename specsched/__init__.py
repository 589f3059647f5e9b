"""specsched: a simulator and trace-replay tool for speculative-decoding scheduling."""

__version__ = "0.1.0"
