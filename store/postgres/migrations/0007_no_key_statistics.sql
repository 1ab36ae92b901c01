-- No copy of a user's encryption key outside its row. ANALYZE (autovacuum
-- runs it) keeps sample values of each column in pg_statistic, where
-- deleting the user's row would not reach them: collect none for the keys,
-- nor for the sealed texts (no query filters on them). Changing a column's
-- type to its own type drops the statistics gathered before.
ALTER TABLE memory_users ALTER COLUMN key TYPE bytea;
ALTER TABLE memory_users ALTER COLUMN key SET STATISTICS 0;
ALTER TABLE memory_pairs ALTER COLUMN sealed TYPE bytea;
ALTER TABLE memory_pairs ALTER COLUMN sealed SET STATISTICS 0;
ALTER TABLE memory_texts ALTER COLUMN sealed TYPE bytea;
ALTER TABLE memory_texts ALTER COLUMN sealed SET STATISTICS 0;
