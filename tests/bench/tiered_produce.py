"""Tiered storage figures (KIP-405): produce throughput with tiering on vs off, and copy
throughput to the local-directory tier and to S3 (moto).

    .venv/bin/python tests/bench/tiered_produce.py [--mb 200] [--rounds 3] [--segment-mb 16]
        [--tiers local,s3[,deferred]] [--task-interval-ms 250]

Each round starts, one after the other, a fresh broker per mode, exactly as a user starts
it (``tiercel broker --override ...``, log dir in a temporary directory on disk, asyncio
debug off), creates a one-partition topic with ``segment.bytes`` of ``--segment-mb`` MiB
and has librdkafka produce ``--mb`` MB of 1 KiB values with acks=all:

- ``off``: the broker as shipped (no tiering system), the topic plain;
- ``local``: ``remote.log.storage.system.enable=true``, the local-directory tier
  (``<log dir>/remote-storage``), the topic ``remote.storage.enable=true``;
- ``s3``: the same with the S3 RemoteStorageManager on a moto server (a separate
  process, as tests/support/moto_server.py starts it);
- ``deferred`` (only when asked for): as ``local``, but the topic is created with
  ``remote.log.copy.disable=true``, so nothing is copied during the produce; copies are
  turned on afterwards, and the time until the tier has the whole backlog gives the
  copy throughput with no produce running.

With tiering on, ``remote.log.manager.task.interval.ms`` is ``--task-interval-ms`` so
that segments are copied while the produce runs (the run reports how many were in the
tier when the last record was acknowledged: the measurement is void if none were).

Copy throughput: a thread of this script lists the partition's directory and the tier
every few tens of milliseconds; a segment rolls when the next segment's file appears
and is copied when its manifest (written last) is listed in the tier. The figure is the
bytes of all rolled segments over the time from the first roll until the tier has them
all; the median time from a segment's roll to its manifest is printed beside it.

Prints per-round figures, medians over the rounds and the ratios tiered/off. Not part of
`make test`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from produce_consume import TOPIC, _free_port, _wait_until_ready, produce_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.moto_server import REGION, MotoServer, create_bucket
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX, parse_object_key
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.s3_config import S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore

MIB = 1024 * 1024
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class Broker:
    bootstrap: str
    log_dir: Path
    store: ObjectStore | None  # the tier, to list; None when tiering is off
    pid: int
    deferred: bool = False  # the topic is created with remote.log.copy.disable=true


@dataclass
class Observed:
    """When each segment (by base offset) was first seen rolled and first seen copied."""

    rolled_at: dict[int, float] = field(default_factory=dict)
    copied_at: dict[int, float] = field(default_factory=dict)


@dataclass
class RoundResult:
    produce_mb_s: float
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    copied_by_produce_end: int = 0
    rolled: int = 0
    copy_mb_s: float | None = None
    copy_latency_s: float | None = None


@contextmanager
def tiercel(work: Path, overrides: dict[str, str], store: ObjectStore | None) -> Iterator[Broker]:
    port = _free_port()
    log_dir = work / "tiercel-data"
    command = [
        os.path.join(os.path.dirname(sys.executable), "tiercel"), "broker",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={log_dir}",
    ]  # fmt: skip
    for key, value in overrides.items():
        command += ["--override", f"{key}={value}"]
    env = {**os.environ, "PYTHONASYNCIODEBUG": ""}
    with open(work / "tiercel.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log, env=env)
        try:
            bootstrap = f"127.0.0.1:{port}"
            _wait_until_ready(bootstrap)
            if store is None and "remote.log.storage.system.enable" in overrides:
                store = LocalDirectoryStore(str(log_dir / "remote-storage"))
            yield Broker(bootstrap, log_dir, store, proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)


class Watcher:
    """A thread noting when segments roll locally and when their manifests reach the tier."""

    def __init__(self, broker: Broker, interval_s: float) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.observed = Observed()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def local_bases(self) -> list[int]:
        directory = self.broker.log_dir / f"{TOPIC}-0"
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-4]) for n in names if n.endswith(".log"))

    def poll(self) -> None:
        now = time.monotonic()
        bases = self.local_bases()
        for base in bases[:-1]:  # the active segment has not rolled
            self.observed.rolled_at.setdefault(base, now)
        store = self.broker.store
        if store is None:
            return
        for key in store.list(""):
            parsed = parse_object_key(key)
            if (
                parsed is not None
                and parsed.suffix == MANIFEST_SUFFIX
                and parsed.topic_partition == TopicPartition(TOPIC, 0)
            ):
                self.observed.copied_at.setdefault(parsed.start_offset, now)


def create_topic(bootstrap: str, segment_bytes: int, tiered: bool, deferred: bool) -> None:
    config = {"segment.bytes": str(segment_bytes)}
    if tiered:
        config["remote.storage.enable"] = "true"
    if deferred:
        config["remote.log.copy.disable"] = "true"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def warm_up(broker: Broker, watcher: Watcher, args: argparse.Namespace, value: bytes) -> None:
    """Produce one segment and a little more and wait until it has rolled and, with
    tiering on, is in the tier: connections, metadata, the metadata manager's topic and
    the copy path are warm before the measurement."""
    count = (args.segment_mb + 1) * MIB // args.value_bytes
    produce_all(broker.bootstrap, count, value)
    observed = watcher.observed
    copies = broker.store is not None and not broker.deferred
    done = (lambda: bool(observed.copied_at)) if copies else lambda: bool(observed.rolled_at)
    if not wait_for(done, 120):
        raise TimeoutError("the warm-up segment did not roll (or reach the tier) in 120 s")


def run_round(broker: Broker, args: argparse.Namespace, interval_s: float) -> RoundResult:
    tiered = broker.store is not None
    create_topic(broker.bootstrap, args.segment_mb * MIB, tiered, broker.deferred)
    count = args.mb * 1024 * 1024 // args.value_bytes
    value = os.urandom(args.value_bytes)
    with Watcher(broker, interval_s) as watcher:
        warm_up(broker, watcher, args, value)
        observed = watcher.observed
        warm = set(observed.rolled_at)
        broker_cpu, client_cpu = process_cpu_s(broker.pid), own_cpu_s()
        produce_s = produce_all(broker.bootstrap, count, value)
        watcher.poll()
        result = RoundResult(
            count * args.value_bytes / 1e6 / produce_s,
            process_cpu_s(broker.pid) - broker_cpu,
            own_cpu_s() - client_cpu,
        )
        rolled = sorted(set(observed.rolled_at) - warm)
        result.copied_by_produce_end = len(set(observed.copied_at) & set(rolled))
        result.rolled = len(rolled)
        if not tiered:
            return result
        if broker.deferred:
            result.copy_mb_s = copy_backlog(broker, observed)
            return result
        if not wait_for(lambda: set(rolled) <= set(observed.copied_at), 120):
            missing = sorted(set(rolled) - set(observed.copied_at))
            raise TimeoutError(f"segments {missing} not in the tier within 120 s")
    directory = broker.log_dir / f"{TOPIC}-0"
    total = sum(os.path.getsize(directory / f"{base:020d}.log") for base in rolled)
    first_roll = min(observed.rolled_at[base] for base in rolled)
    last_copy = max(observed.copied_at[base] for base in rolled)
    result.copy_mb_s = total / 1e6 / (last_copy - first_roll)
    result.copy_latency_s = statistics.median(
        observed.copied_at[base] - observed.rolled_at[base] for base in rolled
    )
    return result


def copy_backlog(broker: Broker, observed: Observed) -> float:
    """Turn copies on (``remote.log.copy.disable=false``) and wait until every rolled
    segment is in the tier: MB/s from the change to the last manifest."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry(
        "remote.log.copy.disable", "false", incremental_operation=AlterConfigOpType.SET
    )
    topic = ConfigResource("TOPIC", TOPIC, incremental_configs=[entry])
    start = time.monotonic()
    admin.incremental_alter_configs([topic])[topic].result(30)
    rolled = set(observed.rolled_at)
    if not wait_for(lambda: rolled <= set(observed.copied_at), 300):
        raise TimeoutError("the tier did not get the backlog within 300 s")
    directory = broker.log_dir / f"{TOPIC}-0"
    total = sum(os.path.getsize(directory / f"{base:020d}.log") for base in rolled)
    return total / 1e6 / (max(observed.copied_at[base] for base in rolled) - start)


def tier_overrides(tier: str, args: argparse.Namespace, endpoint: str | None) -> dict[str, str]:
    if tier == "off":
        return {}
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": str(args.task_interval_ms),
    }
    if tier == "s3":
        assert endpoint is not None
        overrides |= {
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.s3.bucket": args.bucket,
            "rsm.config.s3.region": REGION,
            "rsm.config.s3.endpoint.url": endpoint,
        }
    return overrides


def s3_store(endpoint: str, bucket: str) -> ObjectStore:
    return S3ObjectStore(S3Config(bucket, region=REGION, endpoint_url=endpoint))


def print_result(tier: str, result: RoundResult) -> None:
    line = (
        f"  {tier:8s} produce {result.produce_mb_s:7.1f} MB/s (CPU s: broker "
        f"{result.broker_cpu_s:.2f}, client {result.client_cpu_s:.2f})"
    )
    if result.copy_mb_s is not None and result.copy_latency_s is None:
        line += f"   copy of the backlog {result.copy_mb_s:6.1f} MB/s once enabled"
    elif result.copy_mb_s is not None:
        line += (
            f"   copy {result.copy_mb_s:6.1f} MB/s (roll -> tier median "
            f"{result.copy_latency_s:.2f} s), {result.copied_by_produce_end} of "
            f"{result.rolled} segments in the tier at produce end"
        )
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB to produce (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--segment-mb", type=int, default=16, help="segment.bytes in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiers", default="local,s3", help="tiered modes beside off")
    parser.add_argument("--task-interval-ms", type=int, default=250)
    parser.add_argument("--bucket", default="tiercel-bench")
    args = parser.parse_args()
    tiers = ["off", *[t for t in args.tiers.split(",") if t]]
    print(
        f"workload: {args.mb} MB of {args.value_bytes}-byte values, acks=all, one partition, "
        f"segment.bytes {args.segment_mb} MiB, librdkafka; modes {', '.join(tiers)}; "
        f"{args.rounds} alternating rounds",
        flush=True,
    )
    results: dict[str, list[RoundResult]] = {tier: [] for tier in tiers}
    os.environ.update(AWS_ENV)  # moto's fake credentials, for this script and the brokers
    with tempfile.TemporaryDirectory(prefix="bench-tiered-") as tmp:
        moto = MotoServer(Path(tmp) / "moto") if "s3" in tiers else None
        try:
            for round_number in range(1, args.rounds + 1):
                print(f"round {round_number}", flush=True)
                for tier in tiers:
                    work = Path(tempfile.mkdtemp(prefix=f"{tier}-", dir=tmp))
                    endpoint, store = None, None
                    if moto is not None and tier == "s3":
                        moto.restart() if moto.running else moto.start()
                        create_bucket(moto.endpoint_url, args.bucket)
                        endpoint = moto.endpoint_url
                        store = s3_store(endpoint, args.bucket)
                    interval_s = 0.2 if tier == "s3" else 0.05
                    overrides = tier_overrides(tier, args, endpoint)
                    with tiercel(work, overrides, store) as broker:
                        broker.deferred = tier == "deferred"
                        try:
                            result = run_round(broker, args, interval_s)
                        except TimeoutError:
                            kept = shutil.copy(work / "tiercel.log", f"{tmp}-{tier}.log")
                            print(f"the broker's log is kept in {kept}", flush=True)
                            raise
                    results[tier].append(result)
                    print_result(tier, result)
                    shutil.rmtree(work, ignore_errors=True)
        finally:
            if moto is not None:
                moto.kill()
    report(results)


def report(results: dict[str, list[RoundResult]]) -> None:
    off = statistics.median(r.produce_mb_s for r in results["off"])
    print(f"median off      produce {off:7.1f} MB/s")
    for tier, rounds in results.items():
        if tier == "off":
            continue
        produce = statistics.median(r.produce_mb_s for r in rounds)
        copy = statistics.median(r.copy_mb_s or 0.0 for r in rounds)
        latencies = [r.copy_latency_s for r in rounds if r.copy_latency_s is not None]
        during = f", roll -> tier {statistics.median(latencies):.2f} s" if latencies else ""
        print(
            f"median {tier:8s} produce {produce:7.1f} MB/s (ratio {tier}/off {produce / off:.2f})"
            f"   copy {copy:6.1f} MB/s{during}"
        )


if __name__ == "__main__":
    main()
