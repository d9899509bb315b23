-- Trace context: the OpenTelemetry context a job was enqueued in, so that the worker's
-- spans continue the enqueuing code's trace (docs/tracing.md).
--
-- trace_context holds what the application's propagator injected at enqueue (W3C
-- `traceparent`, `tracestate`, and whatever else its propagators carry, such as
-- `baggage`), as a JSON object of text fields. It is written only when the enqueuing
-- code runs with the `otel` extra installed and a span context is active; otherwise NULL.
-- Claims return it with the lease; nothing else reads it.
--
-- At most 4096 bytes of JSON text: the client drops fields beyond that (keeping
-- `traceparent` and `tracestate` when they fit), and the database refuses what is larger
-- or not an object, whoever writes.


-- == Jobs =============================================================================

-- A new column without a default: no rewrite of the table. The constraint is NOT VALID
-- because every existing row holds NULL, which passes it: validating would only scan the
-- whole table under this migration's exclusive lock. New and updated rows are checked.
ALTER TABLE fairsched.jobs
    ADD COLUMN trace_context jsonb,
    ADD CONSTRAINT jobs_trace_context_check
        CHECK (jsonb_typeof(trace_context) = 'object' AND octet_length(trace_context::text) <= 4096)
        NOT VALID;
