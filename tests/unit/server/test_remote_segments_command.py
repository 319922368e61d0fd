"""``tiercel remote-segments`` over a local tier directory: one line per segment upload,
or JSON, the incomplete ones marked, and bad arguments refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from support.rsm_contract import metadata, segment_files
from tiercel.server.cli import main
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.object_layout import object_key


@pytest.fixture
def tier(tmp_path: Path) -> tuple[str, list[str]]:
    """A tier with one complete and one cut-short upload of orders-3; their segment ids."""
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    complete, cut_short = metadata(1200), metadata(1300)
    rsm.copy_log_segment_data(complete, segment_files(tmp_path / "a"))
    # A copy cut short by a crash once the log was in place.
    rsm.store.put_file(object_key(cut_short, "log"), segment_files(tmp_path / "b").log_segment)
    ids = [uuid_to_kafka_str(m.remote_log_segment_id.id) for m in (complete, cut_short)]
    return rsm.root, ids


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["remote-segments", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_lines(tier: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, (complete, cut_short) = tier
    code, out, _ = run(capsys, "--topic", "orders", "--partition", "3", "--dir", root)
    assert code == 0
    [first, second] = out.splitlines()
    topic_id = uuid_to_kafka_str(metadata().remote_log_segment_id.topic_id)
    assert first == (
        f"orders-{topic_id}/3 start=1200 end=1299 epochs=3:1200 size=1000 "
        f"max_timestamp=1700000000000 segment={complete} state=COPY_SEGMENT_FINISHED"
    )
    assert second == (
        f"orders-{topic_id}/3 start=1300 end=- epochs=- size=- max_timestamp=- "
        f"segment={cut_short} state=COPY_SEGMENT_STARTED objects=log"
    )


def test_json(tier: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, (complete, cut_short) = tier
    topic_id = uuid_to_kafka_str(metadata().remote_log_segment_id.topic_id)
    code, out, _ = run(capsys, "--topic", "orders", "--partition", "3", "--dir", root, "--json")
    only_id = [f"--topic-id={topic_id}"]  # a Kafka Uuid string may begin with "-"
    assert run(
        capsys, "--topic", "orders", "--partition", "3", "--dir", root, "--json", *only_id
    ) == (0, out, "")
    assert code == 0
    first, second = json.loads(out)
    assert first == {
        "topic": "orders",
        "partition": 3,
        "topic_id": topic_id,
        "segment_id": complete,
        "start_offset": 1200,
        "end_offset": 1299,
        "segment_leader_epochs": [[3, 1200]],
        "segment_size_in_bytes": 1000,
        "max_timestamp_ms": 1_700_000_000_000,
        "state": "COPY_SEGMENT_FINISHED",
        "objects": sorted(
            ["log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint", "manifest.json"]
        ),
    }
    assert (second["segment_id"], second["state"], second["objects"]) == (
        cut_short,
        "COPY_SEGMENT_STARTED",
        ["log"],
    )
    assert second["end_offset"] is None


def test_another_topic_id_or_partition_lists_nothing(
    tier: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = tier
    other_id = uuid_to_kafka_str(uuid.uuid4())
    assert run(
        capsys, "--topic", "orders", "--partition", "3", f"--topic-id={other_id}", "--dir", root
    ) == (0, "", "")
    assert run(capsys, "--topic", "orders", "--partition", "4", "--dir", root, "--json") == (
        0,
        "[]\n",
        "",
    )


def test_a_missing_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--topic", "t", "--partition", "0", "--dir", str(tmp_path / "x"))
    assert (code, out) == (1, "")
    assert "no directory" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--topic", "t", "--partition", "0"],  # no store
        ["--topic", "t", "--partition", "0", "--dir", "d", "--s3-bucket", "b"],  # two
        ["--partition", "0", "--dir", "d"],
        ["--topic", "t", "--partition", "x", "--dir", "d"],
        ["--topic", "t", "--partition", "-1", "--dir", "d"],
        ["--topic", "", "--partition", "0", "--dir", "d"],
        ["--topic", "..", "--partition", "0", "--dir", "d"],
        ["--topic", "../etc", "--partition", "0", "--dir", "d"],
        ["--topic", "t", "--partition", "0", "--dir", "d", "--topic-id", "not-a-uuid"],
    ],
)
def test_bad_arguments(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["remote-segments", *args])
    assert raised.value.code == 2
    assert "usage" in capsys.readouterr().err
