"""Runtime components: usable straight from Python, no specs, pydantic or Hydra needed.

One subpackage per component (``thread``, ``queue``, ``sharded``, ``stream``), plus the pieces they
share: ``workers`` (the channel, the thread pool and the one module that starts processes) and
``data`` (datasets, transforms, collate functions).
"""
