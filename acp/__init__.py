"""acp: a sync-first Python SDK for the Agent Client Protocol."""

__version__ = "0.1.0"
