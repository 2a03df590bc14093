"""Spark jobs for walmgr (optional: needs ``pyspark``)."""
