"""The shards index: each shard's URL, format, sample count and bytes, read beside the shards,
given, kept in the cache or built, and shared across ranks.
"""
