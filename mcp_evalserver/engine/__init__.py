"""The campaign engine: ledger records, the ledger, state replay, the runner, and what is
computed from a ledger (reports, rescoring, sweeps, calibration, SWE-bench runs)."""
