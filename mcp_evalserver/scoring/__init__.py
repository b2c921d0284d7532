"""Scoring: graders that turn a submission into a verdict, and the statistics over verdicts."""
