"""Runtime components: usable straight from Python, no specs or Hydra needed."""
