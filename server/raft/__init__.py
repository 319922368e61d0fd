"""KRaft's Raft (KIP-595, KIP-630, KIP-996): the replicated ``__cluster_metadata-0`` log,
elections, fetch, snapshots. A library under the quorum controller and the broker's
metadata loader; it imports nothing of the broker (no ReplicaManager, coordinators or
controller), only `storage`, `protocol` and the network client."""
