"""SASL mechanisms' messages and key derivation, sans-io: what a broker's authenticator,
its inter-broker client and the Spark source's broker tail share."""
