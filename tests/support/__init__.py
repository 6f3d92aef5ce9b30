"""Test-side helpers shared across tiers (importable as `support` from tests/conftest.py's directory)."""
