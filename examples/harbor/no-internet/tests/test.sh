#!/bin/bash
# The environment has no network, so `offline` is the only right answer.
if [ "$(cat network.txt 2>/dev/null)" = offline ]; then echo 1; else echo 0; fi \
  > /logs/verifier/reward.txt
