-- Schema version 10: steering across boxes and restarts (issue 22).
-- A steered answer's log entry (stream 'steer') keeps its inference_id,
-- prompt version and candidates' lengths like an inference's, and the turn
-- it refines (steer_turn, '' for an inference of its own) with its steering
-- mode, so that feedback and the next keystroke find it on any box.
ALTER TABLE logs
	ADD COLUMN steer_turn text NOT NULL DEFAULT '',
	ADD COLUMN steer_mode text NOT NULL DEFAULT '';

-- The per-key token buckets every box shares (store.RateLimiter.Take: the
-- steering budget). UNLOGGED like rate_windows: after a crash of PostgreSQL
-- the buckets start full again.
CREATE UNLOGGED TABLE rate_buckets (
	key_hash text PRIMARY KEY,
	tokens   double precision NOT NULL, -- the level after the last request
	at_ns    bigint NOT NULL            -- the time of the last request
);
