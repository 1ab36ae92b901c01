-- Login codes per client address: a code asked for from one address is
-- never replaced or spent from another, and wrong guesses are counted by
-- replyd in memory, never here. The one global code of 0001 and its attempt
-- counter go. TOTP steps used are a row of settings (totp_last_step).
DROP TABLE otp;
DELETE FROM settings WHERE name = 'otp_last_issued_ns';

CREATE TABLE otp_codes (
	scope      text PRIMARY KEY,
	hash       text NOT NULL,
	issued_ns  bigint NOT NULL,
	expires_ns bigint NOT NULL
);
CREATE INDEX otp_codes_by_expiry ON otp_codes (expires_ns);

-- The pause of login by code that wrong codes start (store.OTPLockRule),
-- shared by every box: one row, updated under its row lock.
CREATE TABLE otp_guard (
	id              smallint PRIMARY KEY CHECK (id = 1),
	fails           integer NOT NULL,
	level           integer NOT NULL,
	last_fail_ns    bigint NOT NULL,
	locked_until_ns bigint NOT NULL
);
