-- Schema version 8: steering (issue 22). An outcome records the steering
-- mode of the answer the reply came from ('' for the turn's own answer) and
-- the user's keys pressed and selections as the client reported them (NULL:
-- not reported), from which the keystroke saving rate is computed.
ALTER TABLE logs
	ADD COLUMN outcome_steer_mode text NOT NULL DEFAULT '',
	ADD COLUMN outcome_keys       integer,
	ADD COLUMN outcome_selections integer;
