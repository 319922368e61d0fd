"""A bounded chaos run: random brokers are killed, paused and restarted while an
idempotent acks=all producer streams into an RF=3, min.insync.replicas=2 topic.

One broker at a time is broken (the guarantee covers one failure), for a random few
seconds, by SIGKILL (then started again), SIGSTOP (then SIGCONT) or SIGTERM (controlled
shutdown, then started again). Afterwards every acknowledged record must be in the log
exactly once and in order, and all replicas identical below the high watermark with
identical leader-epoch-checkpoint files. The seed is printed; TIERCEL_CHAOS_SEED
replays a run, TIERCEL_CHAOS_SECONDS makes it longer.
"""

from __future__ import annotations

import os
import random
import time

from support.cluster import ClusterProcess
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence

_DURATION_S = float(os.environ.get("TIERCEL_CHAOS_SECONDS", "45"))
_FAULTS = ("kill", "pause", "terminate")


def test_chaos_keeps_acknowledged_records(cluster: ClusterProcess) -> None:
    seed = int(os.environ.get("TIERCEL_CHAOS_SEED", str(random.randrange(2**32))))
    print(f"chaos seed {seed} (replay: TIERCEL_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    topic = "chaos"
    cluster.create_topic(topic, partitions=2, config={"min.insync.replicas": "2"})
    producers = [SequenceProducer(cluster.bootstrap(), topic, p).start() for p in (0, 1)]
    for producer in producers:
        producer.wait_for_acks(200)
    deadline = time.monotonic() + _DURATION_S
    history = []
    while time.monotonic() < deadline:
        node = rng.choice(sorted(cluster.brokers))
        fault = rng.choice(_FAULTS)
        outage = rng.uniform(1.0, 8.0)
        history.append(f"{fault} {node} for {outage:.1f}s")
        print(history[-1])
        if fault == "pause":
            cluster.pause(node)
            time.sleep(outage)
            cluster.resume(node)
        else:
            if fault == "kill":
                cluster.kill(node)
            else:
                cluster.terminate(node)
            time.sleep(outage)
            cluster.start_broker(node)
        # The next fault only once the cluster has healed from this one.
        for partition in (0, 1):
            cluster.wait_until_isr(topic, partition, cluster.brokers, timeout=90)
        for producer in producers:
            producer.wait_for_acks(100, timeout=90)
    tallies = [producer.stop() for producer in producers]
    for partition, tally in enumerate(tallies):
        assert tally.fatal is None, (seed, history, tally.fatal)
        hw = cluster.assert_replicas_identical_below_hw(topic, partition, timeout=60)
        cluster.assert_epoch_checkpoints_identical(topic, partition, timeout=60)
        verify_sequence(read_partition(cluster.bootstrap(), topic, partition, hw), tally)
        print(f"partition {partition}: {len(tally.acked)} acknowledged, HW {hw}")
