"""What every component's workers share: the channel between threads, the thread pool, processes."""
