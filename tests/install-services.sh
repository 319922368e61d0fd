#!/usr/bin/env bash
# Installs the system tools the test-suite drives (kcat) when they are missing.
# Runs as part of `make test`; harmless when everything is already there.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q "${need[@]}" >/dev/null; } \
    || echo "warning: could not install ${need[*]}; tests needing them will be skipped" >&2
fi
