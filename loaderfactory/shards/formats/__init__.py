"""What a shard file holds and how a sample's fields decode: webdataset tar (``tar/``), Parquet,
``.npy``, images, and how an item ``pack`` laid out is given back.
"""
