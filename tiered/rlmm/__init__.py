"""The RemoteLogMetadataManager (KIP-405): the state of every remote segment."""
