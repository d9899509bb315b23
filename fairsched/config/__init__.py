"""Configuration between a TOML file and the database (apply, diff, export) and the
split of a worker's slots across queues."""
