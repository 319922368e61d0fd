"""tests/support/broker.py's scan for signs of a bug in a broker's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.broker import BrokerProcess, assert_no_unexpected_errors, unexpected_errors

STAMP = "2026-11-25T06:00:00.000Z"
BUGS = [
    f"{STAMP} ERROR tiercel.errors event=unexpected_error context=produce reason=KeyError(1)",
    f"{STAMP} ERROR tiercel.apis event=request_failed api=Fetch error=unknown_server_error "
    "reason=TypeError()",
    f"{STAMP} ERROR tiercel.network event=request_processing_failed client=1:2 reason=X()",
    f"{STAMP} ERROR tiercel.scheduler event=background_task_failed task=t reason=X()",
    f"{STAMP} ERROR asyncio Task exception was never retrieved "
    'exception="Traceback (most recent call last):\\n  File ..."',
    f"{STAMP} ERROR asyncio Exception in callback Foo.bar()",
]
NOT_BUGS = [
    f"{STAMP} ERROR tiercel.apis event=request_failed api=CreateTopics error=invalid_request",
    f"{STAMP} ERROR tiercel.errors event=storage_error context=fetch reason=OSError(5)",
    f"{STAMP} WARNING tiercel.produce event=produce_rejected error=corrupt_message",
    f"{STAMP} INFO tiercel.network event=invalid_request_size client=1:2 size=1",
]


@pytest.mark.parametrize("line", BUGS)
def test_signs_of_a_bug_are_found(line: str) -> None:
    assert unexpected_errors("\n".join([*NOT_BUGS, line])) == [line]


def test_expected_errors_are_not_bugs() -> None:
    assert unexpected_errors("\n".join(NOT_BUGS)) == []


def test_each_check_reads_only_new_whole_lines(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    broker.log_path.write_text(NOT_BUGS[0] + "\n" + BUGS[0] + "\n" + BUGS[2][:30])
    with pytest.raises(AssertionError, match="event=unexpected_error"):
        assert_no_unexpected_errors([broker])
    assert_no_unexpected_errors([broker])  # reported once
    with open(broker.log_path, "a") as log:
        log.write(BUGS[2][30:] + "\n")  # the half-written line is completed
    assert broker.new_unexpected_errors() == [BUGS[2]]
