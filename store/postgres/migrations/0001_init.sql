-- replyd's schema, version 1: everything the bbolt store holds.
-- Times are Unix nanoseconds (bigint), as exact as Go's time.Time; in psql,
-- to_timestamp(created_ns / 1e9) shows one. NULL stands for "never".

CREATE TABLE settings (
	name  text PRIMARY KEY,
	value text NOT NULL
);

CREATE TABLE api_keys (
	hash                  text PRIMARY KEY,
	seq                   bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	client_id             text NOT NULL,
	status                text NOT NULL,
	scopes                text[],
	rate_limit_per_minute integer NOT NULL,
	created_ns            bigint NOT NULL,
	revoked_ns            bigint,
	last_used_ns          bigint
);
CREATE INDEX api_keys_by_age ON api_keys (created_ns DESC, seq DESC);

CREATE TABLE prompts (
	seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	version    text NOT NULL UNIQUE,
	prompt     text NOT NULL,
	created_ns bigint NOT NULL
);

-- The one outstanding OTP code. attempts counts every verification of it
-- (one atomic increment each), right or wrong.
CREATE TABLE otp (
	id         smallint PRIMARY KEY CHECK (id = 1),
	hash       text NOT NULL,
	issued_ns  bigint NOT NULL,
	expires_ns bigint NOT NULL,
	attempts   integer NOT NULL
);

CREATE TABLE sessions (
	token_hash text PRIMARY KEY,
	expires_ns bigint NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions (expires_ns);

CREATE TABLE logs (
	seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	ts_ns         bigint NOT NULL,
	level         text NOT NULL,
	message       text NOT NULL,
	resource_type text NOT NULL,
	resource_id   text NOT NULL,
	stream        text NOT NULL,
	subject       text NOT NULL,
	status        integer NOT NULL,
	latency_ms    bigint NOT NULL,
	node          text NOT NULL
);
CREATE INDEX logs_by_time ON logs (ts_ns, seq);
-- Stats read only this: the infer entries' times and subjects.
CREATE INDEX logs_infer_by_time ON logs (ts_ns) INCLUDE (subject) WHERE stream = 'infer';
