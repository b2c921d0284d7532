#!/bin/bash
# Runs the agent's script: left hanging, it runs past [verifier] timeout_sec.
if [ "$(bash /app/run.sh)" = done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
