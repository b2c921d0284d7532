"""Inspect AI sandbox provider `evalserver`: each sample gets a copy-on-write workspace.

Installed with `pip install mcp-evalserver[inspect]`; Inspect finds it through the
`inspect_ai` entry point group (see pyproject.toml), which imports `.provider`, whose
`@sandboxenv` decorator registers it. Use as `sandbox=("evalserver", "evalserver.yaml")`.
"""
