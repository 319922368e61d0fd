"""tests/support/tools.py: a missing tool skips a test locally and fails it under CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.tools import required_tool


def test_a_tool_on_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "kafkacat"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert required_tool("kcat", "kafkacat") == str(tool)


@pytest.mark.parametrize("ci", ["", "false"])
def test_a_missing_tool_skips_outside_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="kcat is not installed"):
        required_tool("kcat")


def test_a_missing_tool_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        required_tool("kcat")
