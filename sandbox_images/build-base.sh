#!/usr/bin/env bash
# Builds the sandbox base image (Debian bookworm with python3, git, patch) and prints its tag.
#
# The tag carries a hash of this script, so a changed recipe builds a new image and an unchanged
# one is never rebuilt. No registry is needed: the root filesystem comes from debootstrap and
# enters Docker through `docker import`. When a registry does answer (quickly), the official
# Debian image plus the same packages is used instead, which is faster than debootstrap.
#
# Usage: bash sandbox_images/build-base.sh               build when missing, print the tag
#        bash sandbox_images/build-base.sh --print-tag    print the tag only
#        bash sandbox_images/build-base.sh --print-mirror print the Debian mirror debootstrap uses
# Needs: a running Docker engine; root and debootstrap for the no-registry path.
# The mirror is $DEBIAN_MIRROR, else the machine's own apt configuration's first source of
# bookworm ($APT_ETC, default /etc/apt): the repository names no package host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
recipe_hash=$(sha256sum "$here/build-base.sh" | cut -c1-12)
TAG="mcp-evalserver/base:bookworm-$recipe_hash"
# A stable alias for people typing commands; code uses the hashed tag.
ALIAS="mcp-evalserver/base:bookworm"
PACKAGES=python3,git,patch,ca-certificates,procps
PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log() { echo "build-base: $*" >&2; }

# The first URI of a `deb` source for bookworm, in deb822 `.sources` files or one-line lists.
apt_mirror() {
  local etc=${APT_ETC:-/etc/apt}
  local sources=() lists=()
  shopt -s nullglob
  sources=("$etc"/sources.list.d/*.sources)
  lists=("$etc"/sources.list "$etc"/sources.list.d/*.list)
  shopt -u nullglob
  {
    for f in "${sources[@]}"; do
      awk 'BEGIN { RS = "" }
        {
          types = ""; suites = ""; uris = ""; enabled = "yes"
          n = split($0, lines, "\n")
          for (i = 1; i <= n; i++) {
            line = lines[i]
            if (line ~ /^Types:/) types = " " substr(line, 7) " "
            else if (line ~ /^Suites:/) suites = " " substr(line, 8) " "
            else if (line ~ /^URIs:/) uris = substr(line, 6)
            else if (line ~ /^Enabled:/) enabled = substr(line, 9)
          }
          gsub(/[ \t]+/, " ", types); gsub(/[ \t]+/, " ", suites); gsub(/^[ \t]+/, "", enabled)
          if (enabled != "no" && types ~ / deb / && suites ~ / bookworm /) {
            split(uris, first, " "); print first[1]
          }
        }' "$f"
    done
    for f in "${lists[@]}"; do
      [ -f "$f" ] || continue
      # deb [options] URI suite components
      awk '$1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) == "bookworm") print $i
        }' "$f"
    done
  } | sed -n 1p  # reads everything: no SIGPIPE under pipefail
}

if [ "${1:-}" = "--print-tag" ]; then echo "$TAG"; exit 0; fi
MIRROR=${DEBIAN_MIRROR:-$(apt_mirror)}
if [ "${1:-}" = "--print-mirror" ]; then
  [ -n "$MIRROR" ] || { log "no bookworm source in ${APT_ETC:-/etc/apt}: set DEBIAN_MIRROR=<a Debian mirror's URL>"; exit 1; }
  echo "$MIRROR"; exit 0
fi

if docker image inspect "$TAG" >/dev/null 2>&1; then
  docker tag "$TAG" "$ALIAS"
  echo "$TAG"
  exit 0
fi

out="$here/out"
mkdir -p "$out"
# Two callers at once (make test beside a benchmark) must not debootstrap into one directory.
exec 9>"$out/.lock"
flock 9
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG"; exit 0; fi

from_registry() {
  # Bounded: on a machine with no registry the pull fails or hangs; either way fall back.
  timeout 20 docker pull -q debian:bookworm-slim >/dev/null 2>&1 || return 1
  log "registry reachable: building from debian:bookworm-slim"
  local cid
  cid=$(docker create --network host debian:bookworm-slim bash -c \
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${PACKAGES//,/ } >/dev/null && rm -rf /var/lib/apt/lists/*")
  if ! docker start -a "$cid" >&2; then docker rm -f "$cid" >/dev/null; return 1; fi
  docker commit --change "ENV $PATH_ENV" --change 'CMD ["/bin/bash"]' "$cid" "$TAG" >/dev/null
  docker rm -f "$cid" >/dev/null
}

from_debootstrap() {
  [ "$(id -u)" = 0 ] || { log "debootstrap needs root: run \`sudo bash $0\`"; exit 1; }
  command -v debootstrap >/dev/null || { log "debootstrap missing: run \`sudo bash scripts/ensure-docker.sh\`"; exit 1; }
  [ -n "$MIRROR" ] || { log "no bookworm source in ${APT_ETC:-/etc/apt} to debootstrap from: set DEBIAN_MIRROR=<a Debian mirror's URL>"; exit 1; }
  local rootfs="$out/rootfs-$recipe_hash"
  rm -rf "$rootfs"
  log "no registry: debootstrap bookworm (minbase) from $MIRROR into $rootfs (about a minute)"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$MIRROR" >"$out/debootstrap.log" 2>&1 \
    || { tail -n 20 "$out/debootstrap.log" >&2; log "debootstrap failed (full log: $out/debootstrap.log)"; exit 1; }
  # Caches and logs only make the image bigger.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar -C "$rootfs" --numeric-owner -c . \
    | docker import --change "ENV $PATH_ENV" --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
  rm -rf "$rootfs"
}

if [ "${MCP_EVALSERVER_NO_REGISTRY:-}" = 1 ] || ! from_registry; then
  from_debootstrap
fi
docker tag "$TAG" "$ALIAS"
log "built $TAG"
echo "$TAG"
