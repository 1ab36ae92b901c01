-- Version 13: what each box measured of its model files (issue 41): the
-- latest timing and comparison of each file, kept so that a restart keeps
-- them. Per box (node), like model_choices; body is the models feature's
-- JSON, which the store keeps as it is.
CREATE TABLE model_records (
	node        text NOT NULL,
	file        text NOT NULL,
	what        text NOT NULL,
	bytes       bigint NOT NULL,
	mod_time_ns bigint NOT NULL,
	at_ns       bigint NOT NULL,
	body        bytea NOT NULL,
	PRIMARY KEY (node, file, what)
);
