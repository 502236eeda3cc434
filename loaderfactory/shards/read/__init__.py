"""One process's reads of a shards dataset: its ``ShardReader`` with its open shards, batch reads,
per-sample transforms and background reads (predownload, read-ahead, the next shard).
"""
