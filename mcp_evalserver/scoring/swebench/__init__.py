"""SWE-bench's grading harness: test plans, the apply chain, log parsers, its report layout,
and strict mode."""
