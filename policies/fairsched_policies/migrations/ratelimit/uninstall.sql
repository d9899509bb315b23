-- ratelimit: drop its state (run by `fairsched policy uninstall ratelimit`).
DROP FUNCTION IF EXISTS fairsched.ratelimit_admit(text, text[], integer[]);
DROP FUNCTION IF EXISTS fairsched.ratelimit_budget(text, text);
DROP FUNCTION IF EXISTS fairsched.ratelimit_level(text, text);
DROP TABLE IF EXISTS fairsched.ratelimits;
