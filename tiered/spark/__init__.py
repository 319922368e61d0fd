"""Spark reads the remote tier straight from object storage: the PySpark data source
``tiercel`` (`TiercelDataSource`), over the reader library (`tiercel.tiered.reader`).
Imports nothing from ``server``: it runs in Spark's Python workers with no broker."""

from tiercel.tiered.spark.data_source import TiercelDataSource

__all__ = ["TiercelDataSource"]
