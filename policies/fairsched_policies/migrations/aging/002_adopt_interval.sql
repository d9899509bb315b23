-- aging: its queue setting aging_interval_seconds, adopted from the engine's migrations that
-- created it (001_baseline, 004_bounds), as it stands after them. From here on it is the
-- policy's: a change to it is a new file of this folder (003_...), never an engine
-- migration. The engine's enqueue keys each job by it, so it stays on uninstall.
--
-- On a database the engine's migrations built, nothing here changes anything but the
-- comment that names the owner. The column is created only when missing: ADD COLUMN IF
-- NOT EXISTS locks its table before it looks, waiting behind every transaction that uses
-- it and holding up all that come after.

-- aging_interval_seconds: waiting this long is worth one priority level (more than 0, at
-- most 30 days).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.queues'::regclass
                                             AND attname = 'aging_interval_seconds' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.queues ADD COLUMN aging_interval_seconds double precision NOT NULL DEFAULT 60
            CONSTRAINT queues_aging_interval_seconds_range
                CHECK (aging_interval_seconds > 0 AND aging_interval_seconds <= 2592000);
    END IF;
END
$$;


-- == The owner, named =================================================================

COMMENT ON COLUMN fairsched.queues.aging_interval_seconds IS 'aging policy: defined by its migrations (fairsched_policies/migrations/aging)';
