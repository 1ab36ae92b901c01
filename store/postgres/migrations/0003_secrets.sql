-- The installation secrets (store.SecretPseudonym, store.SecretTOTP): kept
-- as they are, because replyd must use them; every box shares them.
CREATE TABLE secrets (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);
