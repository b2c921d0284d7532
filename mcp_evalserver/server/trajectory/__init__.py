"""The scoped trajectory endpoint: one trajectory's workspace tools behind its own token."""
