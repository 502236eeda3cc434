"""Local stand-ins for remote services, for tests, benchmarks and trying shards out on one machine.

``s3``: an S3-compatible server (SeaweedFS) on the loopback interface, from Python
(:func:`~loaderfactory.testing.s3.seaweedfs`) or the command line (``loaderfactory s3-server``).
"""
