#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python packages. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v git >/dev/null || need+=(git)
# The ray test group runs its clusters in a loopback-only network namespace (unshare -n, ip).
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
# The compiled workspace holder (mcp_evalserver/sandbox/holder/) is built statically here.
{ command -v cc >/dev/null && compgen -G '/usr/lib/*-linux-gnu/libc.a' >/dev/null; } || need+=(gcc libc6-dev)
# The dashboard's browser tests drive Debian's chromium through Playwright (never a download).
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "ensure-system: missing ${need[*]}; install them or run as root" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The docker backend's tests need an engine and the base image. Without root nothing can be
# started here: say so and let the docker tests report it (they fail under CI, skip elsewhere).
if [ "$(id -u)" = 0 ]; then
  bash scripts/ensure-docker.sh
elif ! timeout 10 docker info >/dev/null 2>&1; then
  echo "ensure-system: no Docker engine and not root; docker tests will not run (run \`sudo bash scripts/ensure-docker.sh\`)" >&2
fi
