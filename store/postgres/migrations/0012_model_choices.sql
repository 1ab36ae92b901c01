-- Version 12: the model each box chose for its engines on the admin page
-- (issue 36). Model files live on each box, so the choice is per box
-- (node) and engine (kind); previous is what a roll back returns to.
CREATE TABLE model_choices (
	node     text NOT NULL,
	kind     text NOT NULL,
	model    text NOT NULL,
	previous text NOT NULL DEFAULT '',
	at_ns    bigint NOT NULL,
	PRIMARY KEY (node, kind)
);

-- The models that made an answer, by file name ('' when unknown).
ALTER TABLE logs ADD COLUMN model text NOT NULL DEFAULT '';
ALTER TABLE logs ADD COLUMN speech_model text NOT NULL DEFAULT '';
