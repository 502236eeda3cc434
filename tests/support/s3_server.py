"""The tests' and benchmarks' name for :mod:`loaderfactory.testing.s3`: SeaweedFS on loopback."""

from loaderfactory.testing.s3 import S3Server, seaweedfs, weed_binary, without_aws_environment

__all__ = ["S3Server", "seaweedfs", "weed_binary", "without_aws_environment"]
