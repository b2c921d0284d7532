#!/usr/bin/env bash
# The main job: real campaigns end to end on the embedded default backend, then their reports.
set -euo pipefail
cd "$(dirname "$0")/.."
export MCP_EVALSERVER_STATE_DIR="${MCP_EVALSERVER_STATE_DIR:-$PWD/.state}"
cli=.venv/bin/mcp-evalserver
for agent in oracle noop; do
  echo "== campaign: ${agent} agent, examples/answers.jsonl, 3 samples per task" >&2
  "$cli" run "examples/answers-${agent}.json"
  echo
done
echo "state, ledgers and artifacts: $MCP_EVALSERVER_STATE_DIR/campaigns/" >&2
"$cli" status
