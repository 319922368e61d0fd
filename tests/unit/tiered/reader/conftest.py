"""The reader's two record decoders (tiered.reader.record_columns), as a fixture: tests
that read segments run once with the native decoder and once with the Python one."""

from __future__ import annotations

import pytest

from tiercel.tiered.reader import record_columns


@pytest.fixture(params=["native", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which decoder `new_record_columns` hands out for this test."""
    native = request.param == "native"
    if native and not record_columns.native_available():
        pytest.skip("the native decoder is not built (no C compiler at install time)")
    monkeypatch.setattr(record_columns, "pure_python", not native)
    return str(request.param)
