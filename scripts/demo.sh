#!/usr/bin/env bash
# The main job: build the demo suite (real projects, injected bugs; cached), then run campaigns
# over it on the embedded local backend, print their reports and where their files are.
set -euo pipefail
cd "$(dirname "$0")/.."
export MCP_EVALSERVER_STATE_DIR="${MCP_EVALSERVER_STATE_DIR:-$PWD/.state}"
cli=.venv/bin/mcp-evalserver
py=.venv/bin/python

if [ "$(id -u)" != 0 ]; then
  # Workspaces are overlay mounts in private mount namespaces: the local backend needs root.
  echo "make demo needs root: the local backend mounts an overlay per workspace" >&2
  exit 1
fi

# Instances run Debian's python3 (workspaces hide /root, where pyenv lives) and git: install
# them on a fresh machine, as the README promises.
missing=()
[ -x /usr/bin/python3 ] || missing+=(python3)
/usr/bin/python3 -c 'import venv' 2>/dev/null || missing+=(python3-venv)
command -v git >/dev/null || missing+=(git)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} from Debian" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== building the demo suite (pinned PyPI sdists + the bugs in demo/bugs; cached in demo/build)" >&2
"$py" -m demo.build_suite

stamp="$(date -u +%Y%m%d-%H%M%S)"
reports="$MCP_EVALSERVER_STATE_DIR/reports"
campaigns=()
run_campaign() {  # $1: agent label, $2: spec file
  local id="demo-$1-$stamp"
  echo >&2
  echo "== campaign $id: $1 agent, 3 samples per task, scorer: tests (FAIL_TO_PASS/PASS_TO_PASS)" >&2
  "$cli" run "$2" --id "$id"
  mkdir -p "$reports"
  "$cli" report "$id" >"$reports/$id.md"
  "$cli" report "$id" --format json >"$reports/$id.json"
  campaigns+=("$id")
}

run_campaign oracle demo/campaign-oracle.json
run_campaign noop demo/campaign-noop.json

if [ -n "${OPENAI_API_KEY:-}" ] || [ -n "${OPENAI_BASE_URL:-}" ]; then
  # The model and endpoint come from the environment, so this spec is written at run time.
  "$py" - demo/build/campaign-openai.json <<'EOF'
import json, os, sys
spec = {
    "name": "demo-openai",
    "tasks": "tasks.jsonl",
    "samples": 3,
    "agent": {
        "type": "openai",
        "model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        "base_url": os.environ.get("OPENAI_BASE_URL") or None,
        "max_steps": 30,
        "temperature": 0.0,
    },
    "scorer": {"type": "tests", "timeout_s": 300},
    "limits": {"concurrency": 4, "per_instance": 3, "scoring": 2},
}
with open(sys.argv[1], "w") as file:
    json.dump(spec, file, indent=2)
EOF
  run_campaign openai demo/build/campaign-openai.json
else
  echo >&2
  echo "== openai agent skipped: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local" \
    "OpenAI-compatible server; OPENAI_MODEL picks the model, default gpt-4o-mini) to add" \
    "a campaign in which a real model fixes the bugs" >&2
fi

echo >&2
echo "== files (state: $MCP_EVALSERVER_STATE_DIR)" >&2
for id in "${campaigns[@]}"; do
  echo "$id: ledger $MCP_EVALSERVER_STATE_DIR/campaigns/$id/ledger.jsonl," \
    "report $reports/$id.md (and .json)" >&2
done
echo "tasks: demo/build/tasks.jsonl; print a report again with: $cli report <id>" >&2
