-- The worker registry: each running worker process says which queues it serves with how
-- many slots, and how many jobs of each it claimed since it started, so that operators
-- (fairsched web) see workers, capacity and claim rates of every queue, even while no
-- job runs. A worker writes its row at start and every few seconds, and
-- deletes it when it stops; a row not renewed for a minute is a worker that died
-- (kill -9, lost host) and counts for nothing; rows a day old are deleted by the next
-- worker that reports.
--
-- Written only through the two functions below (SECURITY DEFINER, search_path pinned):
-- a worker role needs no privilege on the table.

CREATE TABLE fairsched.workers (
    owner       text PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 200),
    queues      jsonb NOT NULL CHECK (jsonb_typeof(queues) = 'object'),
    -- per queue: jobs claimed since the worker started, and claims per second between
    -- its last two reports (computed by worker_seen)
    claimed     jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(claimed) = 'object'),
    rates       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(rates) = 'object'),
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);

-- queues: {"queue name": slots, ...}, at most 1000 queues of 0 to 100000 slots; claimed:
-- {"queue name": jobs claimed since start, ...}, whole numbers from 0.
CREATE FUNCTION fairsched.worker_seen(owner text, queues jsonb, claimed jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(queues) IS DISTINCT FROM 'object'
       OR (SELECT count(*) FROM jsonb_object_keys(queues)) > 1000
       OR EXISTS (SELECT 1 FROM jsonb_each(queues) AS q(name, slots)
                   WHERE jsonb_typeof(q.slots) <> 'number'
                      OR NOT (q.slots::numeric BETWEEN 0 AND 100000)
                      OR length(q.name) NOT BETWEEN 1 AND 63) THEN
        RAISE EXCEPTION 'a worker''s queues are an object of at most 1000 queue names, each with 0 to 100000 slots'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(claimed) IS DISTINCT FROM 'object'
       OR EXISTS (SELECT 1 FROM jsonb_each(claimed) AS c(name, n)
                   WHERE NOT queues ? c.name OR jsonb_typeof(c.n) <> 'number'
                      OR NOT (c.n::numeric BETWEEN 0 AND 1e15) OR c.n::numeric <> trunc(c.n::numeric)) THEN
        RAISE EXCEPTION 'a worker''s claim counts are an object of its queues, each a whole number from 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO fairsched.workers AS w (owner, queues, claimed) VALUES (owner, queues, claimed)
    ON CONFLICT ON CONSTRAINT workers_pkey
    DO UPDATE SET queues = excluded.queues, claimed = excluded.claimed, seen_at = now(),
                  rates = coalesce((
                      SELECT jsonb_object_agg(c.name, round(greatest(c.n::numeric - coalesce((w.claimed ->> c.name)::numeric, 0), 0)
                                              / greatest(extract(epoch FROM now() - w.seen_at), 0.001), 1))
                        FROM jsonb_each(excluded.claimed) AS c(name, n)), '{}');
    DELETE FROM fairsched.workers AS w WHERE w.seen_at < now() - interval '1 day';
END
$$;

CREATE FUNCTION fairsched.worker_gone(owner text) RETURNS void
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ DELETE FROM fairsched.workers AS w WHERE w.owner = worker_gone.owner $$;

REVOKE ALL ON FUNCTION fairsched.worker_seen(text, jsonb, jsonb), fairsched.worker_gone(text) FROM PUBLIC;

DO $$
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN ('fairsched_worker', 'fairsched_admin')) < 2 THEN
        RAISE WARNING 'fairsched roles are missing: no grants on fairsched.workers made; '
                      'create them and run the roles block of migrations/010_workers.sql';
        RETURN;
    END IF;
    GRANT EXECUTE ON FUNCTION fairsched.worker_seen(text, jsonb, jsonb), fairsched.worker_gone(text)
       TO fairsched_worker, fairsched_admin;
    GRANT SELECT ON fairsched.workers TO fairsched_worker;
END
$$;
