-- Version 10: live listening (issue 23). A live ticket is the one-time
-- ticket that opens one live session; only its SHA-256 is kept, and taking
-- it deletes it (DELETE ... RETURNING), so that of the boxes sharing this
-- database exactly one honours it. live_off holds the keys whose live
-- listening an administrator switched off (consent).
CREATE TABLE live_tickets (
	hash       text PRIMARY KEY,
	key_hash   text NOT NULL,
	created_ns bigint NOT NULL,
	expires_ns bigint NOT NULL
);
CREATE INDEX live_tickets_by_expiry ON live_tickets (expires_ns);

CREATE TABLE live_off (
	key_hash text PRIMARY KEY
);
