"""The database layer: connections and the one error-translation boundary, the static
queries, the migration runner and the embedded server."""
