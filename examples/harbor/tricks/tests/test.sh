#!/bin/bash
# Uses bash, python3 and the workdir, as verifiers do: none of them may be the agent's.
python3 /tests/check.py > /logs/verifier/reward.txt
