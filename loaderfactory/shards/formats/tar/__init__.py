"""Webdataset tar shards: their headers walked or read from a member table, members grouped into
samples, and samples read in runs and batches.
"""
