"""Agents: what produces a trajectory's submission."""
