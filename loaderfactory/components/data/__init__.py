"""Datasets, transforms and collate functions the built-in kinds use."""
