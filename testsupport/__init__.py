"""What the tests and the benchmarks share: real server processes and their clients, task
repositories, Ray clusters on loopback.

Not shipped (only `mcp_evalserver` is packaged). `bench/` imports this, never `tests/`
(tests/test_bench_imports.py checks); the tests import it too, so nothing here has a copy.
"""
