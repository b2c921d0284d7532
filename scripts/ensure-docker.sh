#!/usr/bin/env bash
# Makes a Docker engine answer on /var/run/docker.sock and the sandbox base image exist.
# Idempotent: each step is skipped when its result is already there. Run as root.
#
# /usr/local/bin/docker on these machines is a client only, so the engine comes from Debian's
# docker.io. No systemd runs here: dockerd is started in the background with its log in a file.
# `--bridge=none --iptables=false` is enough because instance containers use `--network none`.
# MCP_EVALSERVER_DOCKERD_BRIDGE=default starts the engine with its default bridge instead, so
# tasks that ask for network (Harbor's allow_internet = true) get one of their own. On a
# bridgeless engine, image builds reach this machine's network (its package mirrors) only with
# MCP_EVALSERVER_DOCKER_BUILD_NETWORK=host (`--build-network host`): an operator's decision.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE_DIR=${MCP_EVALSERVER_DOCKER_STATE:-/var/lib/mcp-evalserver}
LOG=$STATE_DIR/dockerd.log
WAIT_SECONDS=${DOCKERD_WAIT_SECONDS:-60}
BRIDGE=${MCP_EVALSERVER_DOCKERD_BRIDGE:-none}
case "$BRIDGE" in
  none) DOCKERD_FLAGS=(--bridge=none --iptables=false) ;;
  default) DOCKERD_FLAGS=() ;;
  *) echo "ensure-docker: MCP_EVALSERVER_DOCKERD_BRIDGE is '$BRIDGE'; give none or default" >&2; exit 1 ;;
esac

die() { echo "ensure-docker: $*" >&2; exit 1; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

if ! engine_answers; then
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and this is not root: run \`sudo bash scripts/ensure-docker.sh\`"
  need=()
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-docker: installing ${need[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  mkdir -p "$STATE_DIR"
  # A dockerd killed hard leaves its pid file behind and refuses to start again.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  if ! pgrep -x dockerd >/dev/null; then
    echo "ensure-docker: starting dockerd (log: $LOG)"
    # setsid: the engine must outlive the shell (make, CI step) that started it.
    setsid dockerd "${DOCKERD_FLAGS[@]}" >>"$LOG" 2>&1 </dev/null &
  fi
  deadline=$((SECONDS + WAIT_SECONDS))
  until engine_answers; do
    if [ $SECONDS -ge $deadline ]; then
      echo "ensure-docker: dockerd did not answer within ${WAIT_SECONDS}s; last lines of $LOG:" >&2
      tail -n 30 "$LOG" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  echo "ensure-docker: engine up ($(docker version --format '{{.Server.Version}}'))"
fi

# debootstrap is needed only for a base image build; install it even when the engine was up.
if ! command -v debootstrap >/dev/null; then
  [ "$(id -u)" = 0 ] || die "debootstrap is missing: run \`sudo bash scripts/ensure-docker.sh\`"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

if ! docker network inspect bridge >/dev/null 2>&1 && [ -z "${MCP_EVALSERVER_DOCKER_BUILD_NETWORK:-}" ]; then
  echo "ensure-docker: this engine has no bridge: image builds that install packages need" \
    "MCP_EVALSERVER_DOCKER_BUILD_NETWORK=host (or --build-network host)"
fi

bash sandbox_images/build-base.sh
