"""The engine: enqueue, the claim composer, the fenced lease transitions, recovery,
retries and dead jobs. It imports no face (CLI, worker, web, demo)."""
