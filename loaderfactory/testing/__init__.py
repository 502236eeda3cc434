"""What tests, benchmarks and trials need besides the package itself.

``contract_data``: the files the contract tests read for the kinds that read files
(:mod:`~loaderfactory.testing.contract_data`, registered with each kind's contract).
``s3``: an S3-compatible server (SeaweedFS) on the loopback interface, from Python
(:func:`~loaderfactory.testing.s3.seaweedfs`) or the command line (``loaderfactory s3-server``).
"""
