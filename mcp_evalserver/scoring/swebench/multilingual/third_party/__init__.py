"""SWE-bench 5.0.2's log parsers for its other languages, as swebench ships them
(`swebench/harness/log_parsers/`, MIT licence, (c) the SWE-bench authors): third-party code,
kept line for line so it diffs cleanly against upstream; only the imports changed."""
