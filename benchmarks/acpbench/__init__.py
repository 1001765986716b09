"""The `make bench` harness: our SDK vs the official Python SDK vs a bare msgspec pipe.

Modules: ``scenarios`` (what is measured), ``implementations`` (who is measured),
``official_venv`` (installs the official SDK in its own venv), ``measure`` (runs one client
process or one import), ``report`` (medians, ratios, table, JSON). Entry point: ``run.py``.
"""
