"""The Makefile's venv step on a machine without python3-venv: ``python3 -m venv``
fails after making ``.venv/bin/python`` (ensurepip is missing). Run in a temporary copy
of the Makefile with a fake ``python`` (PYTHON=...), so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.broker import REPO
from support.tools import required_tool

# The venv's bin/python the fake makes: without pip (as Debian's python3 -m venv leaves
# it without python3-venv) or, with FAKE_VENV_OK, one whose pip does nothing.
_VENV_PYTHON = """#!/bin/sh
if [ "$1 $2" = "-m pip" ] && [ -z "$FAKE_VENV_OK" ]; then
  echo "No module named pip" >&2; exit 1
fi
exit 0
"""
FAKE_PYTHON = f"""#!/bin/sh
if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'VENV'
{_VENV_PYTHON}VENV
  chmod +x "$3/bin/python"
  if [ -n "$FAKE_VENV_OK" ]; then exit 0; fi
  echo "The virtual environment was not created successfully because ensurepip is not"
  echo "available.  On Debian/Ubuntu systems, you need to install the python3-venv package"
  exit 1
fi
exit 2
"""


def make_venv(tmp_path: Path, venv_ok: bool) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return subprocess.run(
        [required_tool("make"), f"PYTHON={fake}", ".venv/bin/tiercel"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "FAKE_VENV_OK": "1" if venv_ok else ""},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    # what the venv target depends on
    for name in ("Makefile", "pyproject.toml", "setup.py", "tiered/reader/_record_columns.c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def test_a_failing_venv_is_removed_and_explained(checkout: Path) -> None:
    result = make_venv(checkout, venv_ok=False)
    assert result.returncode != 0
    assert "apt-get install python3-venv" in result.stderr
    assert not (checkout / ".venv").exists()


def test_a_half_made_venv_is_removed_and_made_again(checkout: Path) -> None:
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").symlink_to("/nonexistent/python3")
    result = make_venv(checkout, venv_ok=True)
    assert result.returncode == 0, result.stderr
    assert "removing the half-made .venv" in result.stderr
    assert (checkout / ".venv" / "bin" / "tiercel").exists()


def test_too_old_a_python_is_named(checkout: Path) -> None:
    old = checkout / "old-python"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    result = subprocess.run(
        [required_tool("make"), f"PYTHON={old}", ".venv/bin/tiercel"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "needs Python >= 3.11" in result.stderr
    assert not (checkout / ".venv").exists()
