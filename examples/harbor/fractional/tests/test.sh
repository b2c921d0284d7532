#!/bin/bash
# Half a point per file: a partial answer scores 0.5.
points=0
[ "$(cat a.txt 2>/dev/null)" = alpha ] && points=$((points + 1))
[ "$(cat b.txt 2>/dev/null)" = beta ] && points=$((points + 1))
case $points in 0) echo 0 ;; 1) echo 0.5 ;; 2) echo 1 ;; esac > /logs/verifier/reward.txt
