"""Statistics over verdicts: pass rates, pass@k, intervals, resampling, comparisons, agreement."""
