"""Adapters that give other frameworks our sandboxes; each sits above the sandbox seam."""
