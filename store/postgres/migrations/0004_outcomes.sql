-- Schema version 4: outcomes (POST /v1/feedback) and the memory of users
-- who opted in with remember: true.

-- What an infer entry records beside its counts: the error code of a failed
-- call; for an answered one its inference id (feedback names it), the
-- system-prompt version, the candidates' lengths in characters, whether it
-- was made with remember: true, and the reported outcome (outcome_kind NULL:
-- none yet). Never text.
ALTER TABLE logs
	ADD COLUMN error_code           text    NOT NULL DEFAULT '',
	ADD COLUMN inference_id         text,
	ADD COLUMN prompt_version       text    NOT NULL DEFAULT '',
	ADD COLUMN candidate_chars      integer[],
	ADD COLUMN remembered           boolean NOT NULL DEFAULT false,
	ADD COLUMN outcome_kind         text,
	ADD COLUMN outcome_rank         integer NOT NULL DEFAULT 0,
	ADD COLUMN outcome_spoken_chars integer NOT NULL DEFAULT 0,
	ADD COLUMN outcome_keystrokes   integer NOT NULL DEFAULT 0,
	ADD COLUMN outcome_ttc_ms       bigint  NOT NULL DEFAULT -1,
	ADD COLUMN outcome_first_ns     bigint,
	ADD COLUMN outcome_at_ns        bigint;
CREATE UNIQUE INDEX logs_by_inference ON logs (inference_id) WHERE inference_id IS NOT NULL;

-- One row per remembering user: its AES-256 key (deleting the row destroys
-- every text of the user: they are only ever stored encrypted with it) and
-- the revision of its pairs, which recall caches on every box compare.
CREATE TABLE memory_users (
	subject    text PRIMARY KEY,
	key        bytea  NOT NULL,
	created_ns bigint NOT NULL,
	last_ns    bigint,
	rev        bigint NOT NULL
);

-- A user's pairs (the partner's turn, what the user said) and the texts of
-- inferences awaiting feedback, AES-GCM sealed under the user's key and
-- bound to their row; seq is the inference's logs.seq, ts_ns its time.
CREATE TABLE memory_pairs (
	subject text   NOT NULL REFERENCES memory_users ON DELETE CASCADE,
	seq     bigint NOT NULL,
	ts_ns   bigint NOT NULL,
	sealed  bytea  NOT NULL,
	PRIMARY KEY (subject, seq)
);
CREATE INDEX memory_pairs_by_time ON memory_pairs (ts_ns);

CREATE TABLE memory_texts (
	subject text   NOT NULL REFERENCES memory_users ON DELETE CASCADE,
	seq     bigint NOT NULL,
	ts_ns   bigint NOT NULL,
	sealed  bytea  NOT NULL,
	PRIMARY KEY (subject, seq)
);
CREATE INDEX memory_texts_by_time ON memory_texts (ts_ns);
