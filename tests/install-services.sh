#!/usr/bin/env bash
# Installs the system tools the test-suite drives when they are missing: kcat, a Java
# runtime (Spark's, for the PySpark reader tests; Debian's default-jre-headless) and
# docker-compose (only its `config` command runs: it validates docker/docker-compose.yml,
# no Docker engine needed). Clusters are KRaft: no ZooKeeper.
# Runs as part of `make test`; harmless when everything is already there.
#
# Each package is installed on its own, so a failure names the package; the package
# lists are refreshed (apt-get update) once, the first time an install fails. Exits
# non-zero when any package could not be installed.
set -uo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-services: apt-get not found; install these (Debian package names) by" \
    "hand: ${need[*]}" >&2
  exit 1
fi
apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
if [ "$(id -u)" != 0 ]; then apt=(sudo "${apt[@]}"); fi

updated=no
failed=()
for package in "${need[@]}"; do
  echo "install-services: installing $package" >&2
  if output=$("${apt[@]}" install -y -q "$package" 2>&1); then continue; fi
  if [ "$updated" = no ]; then
    updated=yes
    echo "install-services: apt-get update" >&2
    if ! update_output=$("${apt[@]}" update -q 2>&1); then
      echo "install-services: apt-get update failed:" >&2
      printf '%s\n' "$update_output" >&2
    fi
    if output=$("${apt[@]}" install -y -q "$package" 2>&1); then continue; fi
  fi
  echo "install-services: could not install the Debian package '$package':" >&2
  printf '%s\n' "$output" >&2
  failed+=("$package")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "install-services: FAILED to install: ${failed[*]} (the tests that need them fail" \
    "under CI and are skipped otherwise; the Spark tests fail without a Java runtime)" >&2
  exit 1
fi
