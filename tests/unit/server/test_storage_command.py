"""``tiercel storage``: random-uuid, format (meta.properties v1 in every log dir and the
metadata log dir, Kafka's refusals) and info, run through the command line's main."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.server.cli import main
from tiercel.server.metadata.bootstrap_directory import read_bootstrap_metadata
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.control_record import ControlRecordType
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.raw_snapshot import FileRawSnapshotReader
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_snapshot import RecordsSnapshotReader
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID
from tiercel.server.raft.voter_set import SupportedVersionRange, VoterNode, VoterSet
from tiercel.storage.checkpoint_file import kafka_str_to_uuid
from tiercel.storage.meta_properties import MetaProperties

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def kraft_args(root: Path, node_id: int = 1) -> list[str]:
    overrides = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "log.dirs": f"{root / 'a'},{root / 'b'}",
        "metadata.log.dir": str(root / "meta"),
    }
    return [arg for key, value in overrides.items() for arg in ("--override", f"{key}={value}")]


def test_random_uuid_prints_a_kafka_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["storage", "random-uuid"]) == 0
    text = capsys.readouterr().out.strip()
    assert len(text) == 22 and kafka_str_to_uuid(text).int > 1


def test_format_writes_meta_properties_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        f"Formatting metadata directory {tmp_path / 'meta'} with metadata.version 4.0-IV3." in out
    )
    assert f"Formatting data directory {tmp_path / 'a'} with metadata.version 4.0-IV3." in out
    metas = [MetaProperties.read(str(tmp_path / d)) for d in ("a", "b", "meta")]
    assert all(m is not None and (m.cluster_id, m.node_id, m.version) == (CLUSTER_ID, 1, 1)
               for m in metas)  # fmt: skip
    ids = {m.directory_id for m in metas if m is not None}
    assert len(ids) == 3 and None not in ids

    # Formatted once: refused, unless the formatted ones are to be left as they are.
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path)]) == 1
    assert "is already formatted. Use --ignore-formatted" in capsys.readouterr().err
    assert main(["storage", "format", "-t", CLUSTER_ID, "-g", *kraft_args(tmp_path)]) == 0
    assert "All of the log directories are already formatted." in capsys.readouterr().out
    # A directory added later is formatted alone.
    args = kraft_args(tmp_path)
    args[args.index(f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'}")] = (
        f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'},{tmp_path / 'c'}"
    )
    assert main(["storage", "format", "-t", CLUSTER_ID, "--ignore-formatted", *args]) == 0
    assert capsys.readouterr().out == (
        f"Formatting data directory {tmp_path / 'c'} with metadata.version 4.0-IV3.\n"
    )


@pytest.mark.parametrize(
    ("extra", "cluster_id", "message"),
    [
        (["--override", "process.roles="], CLUSTER_ID, "only supported for nodes in KRaft mode"),
        ([], "not-a-uuid", "does not appear to be a valid UUID"),
    ],
)
def test_format_refuses(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    cluster_id: str,
    message: str,
) -> None:
    args = kraft_args(tmp_path)
    if extra:
        # A node without process.roles has no controller listeners either.
        args = ["--override", "log.dirs=" + str(tmp_path / "a")]
    assert main(["storage", "format", "-t", cluster_id, *args, *extra]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "a" / "meta.properties").exists()


def test_format_refuses_directories_of_another_cluster_or_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "b").mkdir()
    MetaProperties("AAAAAAAAAAAAAAAAAAAAAQ", 1).write_if_missing(str(tmp_path / "b"))
    assert main(["storage", "format", "-t", CLUSTER_ID, "-g", *kraft_args(tmp_path)]) == 1
    assert "Invalid cluster.id in: " in capsys.readouterr().err
    (tmp_path / "b" / "meta.properties").unlink()
    MetaProperties(CLUSTER_ID, 9).write_if_missing(str(tmp_path / "b"))
    assert main(["storage", "format", "-t", CLUSTER_ID, "-g", *kraft_args(tmp_path)]) == 1
    assert "Stored node id 9 doesn't match previous node id 1" in capsys.readouterr().err


def test_info_shows_the_metadata_and_the_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["storage", "info", *kraft_args(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'a'} does not exist" in out and "Found problems:" in out
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["storage", "info", *kraft_args(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Found log directories:" in out
    assert f"Found metadata: {{cluster.id={CLUSTER_ID}, directory.id=" in out
    assert "node.id=1, version=1}" in out and "problem" not in out


def feature_levels(directory: Path) -> dict[str, int]:
    metadata = read_bootstrap_metadata(str(directory))
    return {r.message.name: r.message.feature_level for r in metadata.records
            if isinstance(r.message, FeatureLevelRecord)}  # fmt: skip


def test_format_writes_the_bootstrap_checkpoint_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path)]) == 0
    # Kafka 4.0's defaults at 4.0-IV3, less what Tiercel does not implement:
    # transaction.version 2 (KIP-890 part 2) is left at 0, which writes no record.
    for directory in ("a", "b", "meta"):
        assert (tmp_path / directory / "bootstrap.checkpoint").is_file()
        assert not (tmp_path / directory / "bootstrap.checkpoint.tmp").exists()
        assert feature_levels(tmp_path / directory) == {"metadata.version": 25, "group.version": 1}


def test_format_at_a_release_version_and_feature_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*kraft_args(tmp_path), "--release-version", "3.9", "--feature", "group.version=0"]
    assert main(["storage", "format", "-t", CLUSTER_ID, *args]) == 0
    assert "with metadata.version 3.9-IV0." in capsys.readouterr().out
    assert feature_levels(tmp_path / "meta") == {"metadata.version": 21}
    # Before 4.0 the consumer protocol is off by default (Kafka's GroupVersion GV_1).
    other = tmp_path / "other"
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(other), "-r", "3.9"]) == 0
    assert feature_levels(other / "meta") == {"metadata.version": 21}
    third = tmp_path / "third"
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(third), "-f",
                 "metadata.version=22"]) == 0  # fmt: skip
    assert feature_levels(third / "meta") == {"metadata.version": 22, "group.version": 1}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-r", "2.8"], "Version 2.8 is not a valid version"),
        (["-f", "metadata.version=3"], "No MetadataVersion with feature level 3"),
        (["-r", "4.0", "-f", "metadata.version=25"], "Use --release-version instead of"),
        (["-f", "share.version=1"], "Unsupported feature: share.version. Supported features"),
        (["-f", "transaction.version=2"], "No feature:transaction.version with feature level 2"),
        (["-f", "group.version"], "Can't parse feature=group.version"),
    ],
)
def test_format_refuses_versions_and_features(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path), *extra]) == 1
    assert message in capsys.readouterr().err
    # Refused before anything is written.
    assert not (tmp_path / "meta").exists()


# -- KIP-853: the initial voters of a dynamic quorum ----------------------------------

DIR_1 = "JEXY6aqzQY-32P5TStzaFg"
DIR_2 = "MvDxzVmcRsaTz33bUuRU6A"
INITIAL = f"1@127.0.0.1:9093:{DIR_1},2@[::1]:9095:{DIR_2}"


def dynamic_args(root: Path, node_id: int = 1, roles: str = "broker,controller") -> list[str]:
    """kraft_args with controller.quorum.bootstrap.servers instead of static voters."""
    args = kraft_args(root, node_id)
    args[args.index(f"controller.quorum.voters={node_id}@127.0.0.1:9093")] = (
        "controller.quorum.bootstrap.servers=127.0.0.1:9093"
    )
    args[args.index("process.roles=broker,controller")] = f"process.roles={roles}"
    listeners = {
        "broker": "PLAINTEXT://127.0.0.1:9092",
        "controller": "CONTROLLER://127.0.0.1:9093",
    }.get(roles)
    if listeners is not None:
        combined = "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
        args[args.index(combined)] = f"listeners={listeners}"
    return args


def bootstrap_snapshot(meta_dir: Path) -> list[Batch[bytes]]:
    partition_dir = meta_dir / "__cluster_metadata-0"
    raw = FileRawSnapshotReader.open(str(partition_dir), BOOTSTRAP_SNAPSHOT_ID)
    return list(RecordsSnapshotReader(raw, IdentitySerde()))


def snapshot_voters(meta_dir: Path) -> tuple[int, VoterSet]:
    """The kraft.version and the voters of the bootstrap snapshot, checked to be laid
    out as Kafka's Formatter writes it."""
    header, footer = bootstrap_snapshot(meta_dir)
    types = [r.type for r in header.control_records]
    assert types == [
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    ]
    assert (header.base_offset, header.epoch, footer.base_offset) == (0, 0, 3)
    assert [r.type for r in footer.control_records] == [ControlRecordType.SNAPSHOT_FOOTER]
    kraft_version = int(header.control_records[1].message.k_raft_version)
    return kraft_version, VoterSet.from_voters_record(header.control_records[2].message)


def test_format_standalone_makes_this_controller_the_only_voter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = dynamic_args(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER_ID, "--standalone", *args]) == 0
    out = capsys.readouterr().out
    assert f"Formatting dynamic metadata voter directory {tmp_path / 'meta'} with" in out
    meta = MetaProperties.read(str(tmp_path / "meta"))
    assert meta is not None and meta.directory_id is not None
    kraft_version, voters = snapshot_voters(tmp_path / "meta")
    assert kraft_version == 1
    assert voters == VoterSet(
        {
            1: VoterNode(
                ReplicaKey(1, meta.directory_id),
                Endpoints.of({"CONTROLLER": HostPort("127.0.0.1", 9093)}),
                SupportedVersionRange(0, 1),
            )
        }
    )
    # Only the metadata log dir holds the metadata partition.
    assert not (tmp_path / "a" / "__cluster_metadata-0").exists()


def test_format_initial_controllers_uses_the_directory_ids_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["-I", INITIAL, *dynamic_args(tmp_path / "voter", node_id=2)]
    assert main(["storage", "format", "-t", CLUSTER_ID, *args]) == 0
    assert "Formatting dynamic metadata voter directory" in capsys.readouterr().out
    meta = MetaProperties.read(str(tmp_path / "voter" / "meta"))
    assert meta is not None and meta.directory_id == kafka_str_to_uuid(DIR_2)
    data = MetaProperties.read(str(tmp_path / "voter" / "a"))
    assert data is not None and data.directory_id not in (None, kafka_str_to_uuid(DIR_2))
    kraft_version, voters = snapshot_voters(tmp_path / "voter" / "meta")
    assert kraft_version == 1
    assert voters.voter_keys == [
        ReplicaKey(1, kafka_str_to_uuid(DIR_1)),
        ReplicaKey(2, kafka_str_to_uuid(DIR_2)),
    ]
    assert voters.listeners(2) == Endpoints.of({"CONTROLLER": HostPort("::1", 9095)})

    # A controller that is not one of them gets its own directory id and the voters.
    args = ["--initial-controllers", INITIAL, *dynamic_args(tmp_path / "other", node_id=7)]
    assert main(["storage", "format", "-t", CLUSTER_ID, *args]) == 0
    assert "Formatting dynamic metadata directory" in capsys.readouterr().out
    other = MetaProperties.read(str(tmp_path / "other" / "meta"))
    assert other is not None and other.directory_id not in (None, kafka_str_to_uuid(DIR_1))
    assert snapshot_voters(tmp_path / "other" / "meta")[1] == voters


def test_format_no_initial_controllers_writes_no_voters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A controller that joins a dynamic quorum later, and a broker, which needs no flag.
    args = dynamic_args(tmp_path / "c", roles="controller")
    assert main(["storage", "format", "-t", CLUSTER_ID, "-N", *args]) == 0
    broker = dynamic_args(tmp_path / "b", node_id=4, roles="broker")
    assert main(["storage", "format", "-t", CLUSTER_ID, *broker]) == 0
    out = capsys.readouterr().out
    assert "Formatting metadata directory" in out and "dynamic" not in out
    assert not (tmp_path / "c" / "meta" / "__cluster_metadata-0").exists()
    assert not (tmp_path / "b" / "meta" / "__cluster_metadata-0").exists()


@pytest.mark.parametrize(
    ("dynamic", "extra", "message"),
    [
        (False, ["--standalone"], "You cannot use --standalone or --initial-controllers when"),
        (False, ["-I", INITIAL], "You cannot use --standalone or --initial-controllers when"),
        (True, [], "Because controller.quorum.voters is not set on this controller, you must"),
        (True, ["-I", "1@h:1"], "No colon following port could be found."),
        (True, ["-I", "1@h:x:" + DIR_1], "Failed to parse port in dynamic voter string."),
        (True, ["--initial-controllers=-1@h:1:" + DIR_1], "Invalid negative node id -1"),
        (True, ["-I", "one@h:1:" + DIR_1], "Failed to parse node id in dynamic voter string."),
        (True, ["-I", "1@h:1:nope"], "Failed to parse directory ID in dynamic voter string."),
        (True, ["-I", "1@[::1:1:" + DIR_1], "but no right bracket was found."),
        (True, ["-I", f"1@h:1:{DIR_1},1@g:2:{DIR_2}"], "Node id 1 was specified more than once."),
        (True, ["-I", ","], "No voters given."),
        (True, ["-s", "-f", "kraft.version=0"], "Cannot set kraft.version to 0 if KIP-853"),
        (False, ["-f", "kraft.version=1"], "Cannot set kraft.version to 1 unless KIP-853"),
        (True, ["-s", "-f", "kraft.version=2"], "No feature:kraft.version with feature level 2"),
    ],
)
def test_format_refuses_initial_controllers(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dynamic: bool,
    extra: list[str],
    message: str,
) -> None:
    args = dynamic_args(tmp_path) if dynamic else kraft_args(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER_ID, *extra, *args]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "meta").exists()


def test_format_standalone_is_for_controllers_and_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = dynamic_args(tmp_path, node_id=4, roles="broker")
    assert main(["storage", "format", "-t", CLUSTER_ID, "--standalone", *broker]) == 1
    assert "You can only use --standalone on a controller." in capsys.readouterr().err
    # At most one of the three flags (Kafka's mutually exclusive group).
    with pytest.raises(SystemExit):
        main(["storage", "format", "-t", CLUSTER_ID, "-s", "-N", *dynamic_args(tmp_path)])
    assert "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "meta").exists()
