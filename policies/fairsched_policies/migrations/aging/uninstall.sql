-- aging: drop what keeps its claim head (run by `fairsched policy uninstall aging`). The
-- jobs' aging_key, the head's columns and the queues' aging_interval_seconds (002) stay:
-- the engine's migrations created them, and enqueue keeps writing the key by the interval.
DROP TRIGGER IF EXISTS jobs_inserted_lower_aging_head ON fairsched.jobs;
DROP TRIGGER IF EXISTS jobs_updated_lower_aging_head ON fairsched.jobs;
DROP FUNCTION IF EXISTS fairsched.aging_head_lower();
DROP FUNCTION IF EXISTS fairsched.aging_head_refresh(text);
