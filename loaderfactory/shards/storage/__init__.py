"""Where a shard's bytes come from: local paths and remote URLs (fsspec, presigned S3 GETs, HTTP
ranges), retries and errors, and the local cache of remote shards.
"""
