-- Version 5: tablet pairings. A row is a pending pairing: the settings of the
-- key that redeeming its one-time code mints; only the code's SHA-256 is
-- kept. A used row stays until it expires (so a second try can be told
-- "already used"); expired rows are deleted.

CREATE TABLE pairings (
	code_hash             text PRIMARY KEY,
	client_id             text NOT NULL,
	status                text NOT NULL,
	scopes                text[],
	rate_limit_per_minute integer NOT NULL,
	created_ns            bigint NOT NULL,
	expires_ns            bigint NOT NULL,
	used_ns               bigint,
	key_hash              text
);
CREATE INDEX pairings_by_expiry ON pairings (expires_ns);
