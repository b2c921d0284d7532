#!/bin/bash
# Two criteria in reward.json (no `reward` key: the score is their mean).
exists=0; correct=0
[ -f sum.txt ] && exists=1
[ "$(tr -d '[:space:]' < sum.txt 2>/dev/null)" = 42 ] && correct=1
printf '{"file_exists": %s, "correct": %s}\n' "$exists" "$correct" > /logs/verifier/reward.json
