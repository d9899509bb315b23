-- pause: drop its state (run by `fairsched policy uninstall pause`).
DROP SCHEMA IF EXISTS fairsched_pause CASCADE;
