"""Command-line coding agents (Claude Code, Codex) run in the workspace behind a model bridge."""
