#!/usr/bin/env bash
# Installs the system tools the test-suite drives when they are missing: kcat, ZooKeeper
# (the Debian package: /usr/share/java/zookeeper.jar, /etc/zookeeper/conf and a JRE; the
# cluster tests start it themselves, no service is enabled) and docker-compose (only its
# `config` command runs: it validates docker/docker-compose.yml, no Docker engine needed).
# Runs as part of `make test`; harmless when everything is already there.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if ! command -v java >/dev/null 2>&1 || [ ! -f /usr/share/java/zookeeper.jar ] \
  || [ ! -d /etc/zookeeper/conf ]; then
  need+=(zookeeper)
fi
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
  if [ "$(id -u)" != 0 ]; then apt=(sudo "${apt[@]}"); fi
  "${apt[@]}" install -y -q "${need[@]}" >/dev/null 2>&1 \
    || { "${apt[@]}" update -q >/dev/null 2>&1 && "${apt[@]}" install -y -q "${need[@]}" >/dev/null; } \
    || echo "warning: could not install ${need[*]}: the kcat and docker-compose tests" \
      "will be skipped, the cluster tests fail without ZooKeeper" >&2
fi
