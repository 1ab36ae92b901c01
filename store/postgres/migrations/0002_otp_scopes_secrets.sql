-- Version 2: login codes per client address (a code asked for from one
-- address is never replaced or spent from another, and wrong guesses are
-- counted by replyd in memory, never here), TOTP steps used once (a row of
-- settings), and the installation secrets (the user-id pseudonym key, the
-- TOTP secret), kept as they are because replyd must use them.
DROP TABLE otp;
DELETE FROM settings WHERE name = 'otp_last_issued_ns';

CREATE TABLE otp_codes (
	scope      text PRIMARY KEY,
	hash       text NOT NULL,
	issued_ns  bigint NOT NULL,
	expires_ns bigint NOT NULL
);
CREATE INDEX otp_codes_by_expiry ON otp_codes (expires_ns);

CREATE TABLE secrets (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);
