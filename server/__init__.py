"""Memory server: conversation memory for AI agents over HTTP."""

__version__ = "0.1.0"
