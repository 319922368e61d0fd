"""System tools some tests drive (kcat, docker-compose), found on PATH.

`make test` installs them first (tests/install-services.sh). A test that needs a
missing tool is skipped on a developer's machine, but fails under CI (``CI=true``, as
.ci/run and most CI services set it): there a skip would hide that the suite did not
run what it claims to.
"""

from __future__ import annotations

import os
import shutil

import pytest

INSTALL_HINT = "run `bash tests/install-services.sh` (Debian packages)"


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def required_tool(*names: str) -> str:
    """The path of the first of ``names`` on PATH; skips the test if none is there, or
    fails it under CI."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    message = f"{' or '.join(names)} is not installed: {INSTALL_HINT}"
    if under_ci():
        pytest.fail(message + " (CI=true: a missing tool is a failure)", pytrace=False)
    pytest.skip(message)
