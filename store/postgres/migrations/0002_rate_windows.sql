-- The per-key rate-limit windows every box shares (store.RateLimiter).
-- UNLOGGED: no WAL and no fsync per request; after a crash of PostgreSQL
-- the table comes back empty, which only opens fresh windows. Standbys do
-- not receive it either: after a failover, windows start afresh.
CREATE UNLOGGED TABLE rate_windows (
	key_hash text PRIMARY KEY,
	start_ns bigint NOT NULL,
	count    integer NOT NULL,  -- requests admitted in the window
	admitted boolean NOT NULL   -- whether the last request was admitted
);
