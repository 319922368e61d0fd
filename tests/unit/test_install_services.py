"""tests/install-services.sh with a fake apt-get on PATH: one package at a time, one
apt-get update when an install fails, a failure named and the exit status non-zero."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.broker import REPO

SCRIPT = REPO / "tests" / "install-services.sh"
# Records each call; `install` fails for the packages in FAKE_APT_BROKEN, and for every
# package until `update` has run when FAKE_APT_STALE is set (stale package lists).
FAKE_APT_GET = """#!/bin/bash
echo "$*" >> "$FAKE_APT_LOG"
case "$1" in
  update) : > "$FAKE_APT_LOG.updated"; exit 0 ;;
  install)
    package="${@: -1}"
    if [ -n "${FAKE_APT_STALE:-}" ] && [ ! -e "$FAKE_APT_LOG.updated" ]; then
      echo "E: Unable to locate package $package"; exit 100
    fi
    for broken in ${FAKE_APT_BROKEN:-}; do
      if [ "$package" = "$broken" ]; then echo "E: Package $package is broken"; exit 100; fi
    done
    exit 0 ;;
esac
exit 1
"""


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the script with a PATH holding only the fake apt-get (and sudo), env and id:
    kcat, java and docker-compose are all missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("env", "id"):
        real = shutil.which(tool)
        assert real is not None
        (bin_dir / tool).symlink_to(real)
    (bin_dir / "apt-get").write_text(FAKE_APT_GET)
    (bin_dir / "sudo").write_text('#!/bin/bash\nexec "$@"\n')
    for fake in ("apt-get", "sudo"):
        (bin_dir / fake).chmod(0o755)
    log = tmp_path / "apt.log"
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, str(SCRIPT)],
        env={"PATH": str(bin_dir), "FAKE_APT_LOG": str(log), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def installs(calls: list[str]) -> list[str]:
    return [call.rsplit(" ", 1)[-1] for call in calls if call.startswith("install")]


def test_each_missing_package_is_installed_on_its_own(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path)
    assert result.returncode == 0, result.stderr
    assert installs(calls) == ["kcat", "default-jre-headless", "docker-compose"]
    assert "update -q" not in calls


def test_stale_package_lists_are_updated_once(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, FAKE_APT_STALE="1")
    assert result.returncode == 0, result.stderr
    assert calls.count("update -q") == 1
    assert installs(calls) == ["kcat", "kcat", "default-jre-headless", "docker-compose"]


@pytest.mark.parametrize("stale", ["", "1"])
def test_a_failed_install_is_named_and_fails_the_script(tmp_path: Path, stale: str) -> None:
    result, calls = run_script(
        tmp_path, FAKE_APT_BROKEN="default-jre-headless", FAKE_APT_STALE=stale
    )
    assert result.returncode != 0
    assert "could not install the Debian package 'default-jre-headless'" in result.stderr
    assert "E: Package default-jre-headless is broken" in result.stderr
    assert "FAILED to install: default-jre-headless " in result.stderr
    # One update at most, and the other packages were still installed.
    assert calls.count("update -q") == 1
    assert installs(calls)[-1] == "docker-compose"


def test_without_apt_get_the_missing_packages_are_named(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, str(SCRIPT)], env={"PATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "apt-get not found" in result.stderr
    assert "kcat default-jre-headless docker-compose" in result.stderr
