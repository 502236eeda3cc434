"""``pack``: any dataset written as tar or Parquet shards with their index, locally or to object
storage.
"""
