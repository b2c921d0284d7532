#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python packages. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "ensure-system: missing ${need[*]}; install them or run as root" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
