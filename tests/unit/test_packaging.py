"""The installed distribution is one import package, `tiercel`, and nothing else.

The repository keeps the design card's top-level directories (server/, protocol/, ...);
tiercel/ maps each of them into the package with a relative symlink, so a wheel, an
editable install, mypy and import-linter all see `tiercel.server`, `tiercel.storage`, ...
and nothing generic such as `config` or `server` lands in a user's site-packages.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_PACKAGES = {"tests", "docker", "tiercel"}


def _top_level_packages() -> set[str]:
    return {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "__init__.py").is_file()
    } - NOT_PACKAGES


def test_every_top_level_package_is_mapped_into_tiercel() -> None:
    mapped = {p.name for p in (ROOT / "tiercel").iterdir() if p.is_symlink()}
    assert mapped == _top_level_packages()
    for name in mapped:
        link = ROOT / "tiercel" / name
        assert link.readlink() == Path("..") / name, "links stay relative (clones, docker COPY)"


def test_the_import_package_is_the_repository() -> None:
    import tiercel.server.cli

    assert Path(tiercel.__file__).resolve() == ROOT / "tiercel" / "__init__.py"
    assert Path(tiercel.server.cli.__file__).resolve() == ROOT / "server" / "cli.py"


@pytest.mark.slow
def test_wheel_holds_only_the_tiercel_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = tmp_path.glob("tiercel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"tiercel"}
    for package in _top_level_packages():
        assert f"tiercel/{package}/__init__.py" in names
    assert "tiercel/config/single-node.yaml" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tiercel = tiercel.server.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_readme_import_examples_use_the_namespace() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    imports = [
        line
        for block in blocks
        for line in block.splitlines()
        if re.match(r"(from \S+ )?import ", line)
    ]
    ours = [line for line in imports if "tiercel" in line]
    assert ours, "README shows how to import Tiercel"
    for line in imports:
        module = line.split()[1]
        assert module.split(".")[0] not in _top_level_packages(), line
    for line in ours:
        exec(line, {})  # the example really imports


def test_the_install_builds_the_readers_native_decoder() -> None:
    """`pip install -e .` (what `make` runs) compiles tiered/reader/_record_columns.c in
    place where a C compiler and Python's headers are present; only where they are not
    does the reader fall back to its pure-Python decoder."""
    import sysconfig

    from tiercel.tiered.reader import record_columns

    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not (shutil.which("cc") or shutil.which("gcc")) or not include.is_file():
        pytest.skip("no C compiler or Python headers: the pure-Python decoder is used")
    assert record_columns.native_available(), (
        "the native record decoder is not built: run `pip install -e .` (or `make`) again"
    )
    built = list((ROOT / "tiered" / "reader").glob("_record_columns.*.so"))
    assert built, "the extension lands next to its source, where the editable install finds it"
