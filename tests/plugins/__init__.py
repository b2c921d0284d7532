"""Test-only Python agents and scorers, loaded through the `python` plugin configs."""
