-- Schema version 8: login guards per client address, and memory scoped to
-- the API keys allowed to use it (issue 26).

-- The pauses of login by code (store.OTPLockRule), one row per guard scope:
-- '' is the global guard of 0006's one row, the others one per client
-- address (IPv6: per /64). sources are the distinct addresses of the wrong
-- codes since the last pause (the global guard needs several).
CREATE TABLE otp_guards (
	scope           text PRIMARY KEY,
	fails           integer NOT NULL,
	level           integer NOT NULL,
	last_fail_ns    bigint  NOT NULL,
	locked_until_ns bigint  NOT NULL,
	sources         text[]  NOT NULL DEFAULT '{}'
);
INSERT INTO otp_guards (scope, fails, level, last_fail_ns, locked_until_ns)
	SELECT '', fails, level, last_fail_ns, locked_until_ns FROM otp_guard;
DROP TABLE otp_guard;

-- A memory user's tag is the installation-wide pseudonym of its user_id;
-- its subject, for memories made from now on, the pseudonym within the
-- namespace of the key that made it. Memories from before were found by
-- the tag alone: their subject is their tag.
ALTER TABLE memory_users ADD COLUMN tag text;
UPDATE memory_users SET tag = subject;
ALTER TABLE memory_users ALTER COLUMN tag SET NOT NULL;

-- Which key reads and writes which memory for a user_id: the key that made
-- the memory, and those an admin linked to it. A key without a link for a
-- tag uses its own namespace.
CREATE TABLE memory_links (
	key_hash text NOT NULL,
	tag      text NOT NULL,
	subject  text NOT NULL REFERENCES memory_users ON DELETE CASCADE,
	PRIMARY KEY (key_hash, tag)
);
CREATE INDEX memory_links_by_subject ON memory_links (subject);

-- Existing memories go to the keys that wrote them: the keys of the
-- inferences whose pairs or awaiting texts the memory holds (their log
-- rows record the key).
INSERT INTO memory_links (key_hash, tag, subject)
	SELECT DISTINCT l.resource_id, m.subject, m.subject
	FROM (SELECT subject, seq FROM memory_pairs UNION SELECT subject, seq FROM memory_texts) m
	JOIN logs l ON l.seq = m.seq
	WHERE l.resource_id <> '';

-- A pairing may link the key it mints to a memory.
ALTER TABLE pairings ADD COLUMN memory_subject text NOT NULL DEFAULT '';
