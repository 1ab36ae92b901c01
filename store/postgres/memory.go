package postgres

// Outcomes and the memory of users who opted in (remember: true); see
// store.Store. Remembered texts are sealed with store.SealStrings under the
// user's key in memory_users, bound to their table, subject and row, so
// deleting the user's row leaves nothing readable in the database.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/replyd/replyd/store"
)

// outcomeNames are the outcome columns of logs, in outcomeCols.dest order.
var outcomeNames = []string{"outcome_kind", "outcome_rank", "outcome_spoken_chars", "outcome_keystrokes", "outcome_ttc_ms", "outcome_first_ns", "outcome_at_ns",
	"outcome_steer_mode", "outcome_keys", "outcome_selections"}

// outcomeColumns lists outcomeNames for a SELECT.
var outcomeColumns = columns("", outcomeNames)

// columns joins names, each after prefix (a table alias such as "l.").
func columns(prefix string, names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return strings.Join(out, ", ")
}

// outcomeCols scans outcomeColumns.
type outcomeCols struct {
	kind               *string
	rank, chars, saved int
	ttc                int64
	firstNS, atNS      *int64
	steerMode          string
	keys, selections   *int
}

func (c *outcomeCols) dest() []any {
	return []any{&c.kind, &c.rank, &c.chars, &c.saved, &c.ttc, &c.firstNS, &c.atNS, &c.steerMode, &c.keys, &c.selections}
}

// outcome is the scanned outcome, nil when none was reported.
func (c *outcomeCols) outcome() *store.Outcome {
	if c.kind == nil {
		return nil
	}
	o := &store.Outcome{Kind: *c.kind, Rank: c.rank, SpokenChars: c.chars, KeystrokesSaved: c.saved,
		TimeToChoiceMS: c.ttc, FirstAt: fromNullNS(c.firstNS), At: fromNullNS(c.atNS), SteerMode: c.steerMode}
	if c.keys != nil && c.selections != nil {
		o.ActionsReported, o.KeysPressed, o.Selections = true, *c.keys, *c.selections
	}
	return o
}

// actions are the outcome_keys and outcome_selections of o: NULL when
// the client did not report them.
func actions(o store.Outcome) (keys, selections *int) {
	if !o.ActionsReported {
		return nil, nil
	}
	return &o.KeysPressed, &o.Selections
}

func ints(v []int32) []int {
	if v == nil {
		return nil
	}
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}

// memAAD binds a sealed text to its table, user and row.
func memAAD(table, subject string, seq int64) []byte {
	return []byte(table + "/" + subject + "/" + strconv.FormatInt(seq, 10))
}

// ensureMemoryUser returns the user's key, creating the user with a fresh
// key (revision 1), tag (the subject when empty) and a link from keyHash
// (when not empty) when there is none; of concurrent creators on any box,
// one key wins and all get it.
func ensureMemoryUser(ctx context.Context, tx pgx.Tx, subject, tag, keyHash string, now time.Time) ([]byte, error) {
	key, err := store.NewUserKey()
	if err != nil {
		return nil, err
	}
	if tag == "" {
		tag = subject
	}
	ct, err := tx.Exec(ctx, `INSERT INTO memory_users (subject, key, created_ns, rev, tag) VALUES ($1, $2, $3, 1, $4)
		ON CONFLICT (subject) DO NOTHING`, subject, key, ns(now), tag)
	if err != nil {
		return nil, err
	}
	if ct.RowsAffected() > 0 && keyHash != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO memory_links (key_hash, tag, subject) VALUES ($1, $2, $3)
			ON CONFLICT (key_hash, tag) DO NOTHING`, keyHash, tag, subject); err != nil {
			return nil, err
		}
	}
	err = tx.QueryRow(ctx, `SELECT key FROM memory_users WHERE subject = $1`, subject).Scan(&key)
	return key, err
}

// keysOrNil copies keys, nil when there are none.
func keysOrNil(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	return slices.Clone(keys)
}

// MemorySubject reads the key's link for tag; see store.Store.
func (s *Store) MemorySubject(keyHash, tag string) (string, error) {
	var subject string
	err := s.run("read memory link", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `SELECT subject FROM memory_links WHERE key_hash = $1 AND tag = $2`, keyHash, tag).Scan(&subject)
		if errors.Is(err, pgx.ErrNoRows) {
			subject = ""
			return nil
		}
		return err
	})
	return subject, err
}

// LinkMemory links a key to a memory user; see store.Store.
func (s *Store) LinkMemory(keyHash, subject string) error {
	if keyHash == "" || subject == "" {
		return invalid("empty key hash or subject")
	}
	return s.tx("link memory", func(ctx context.Context, tx pgx.Tx) error {
		var known bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE hash = $1)`, keyHash).Scan(&known); err != nil {
			return err
		}
		if !known {
			return fmt.Errorf("store: API key: %w", store.ErrNotFound)
		}
		ct, err := tx.Exec(ctx, `INSERT INTO memory_links (key_hash, tag, subject)
			SELECT $1, tag, subject FROM memory_users WHERE subject = $2
			ON CONFLICT (key_hash, tag) DO UPDATE SET subject = EXCLUDED.subject`, keyHash, subject)
		if err == nil && ct.RowsAffected() == 0 {
			err = fmt.Errorf("store: memory user: %w", store.ErrNotFound)
		}
		return err
	})
}

// UnlinkMemory removes a key's link to a memory user; see store.Store.
func (s *Store) UnlinkMemory(keyHash, subject string) error {
	return s.run("unlink memory", func(ctx context.Context) error {
		ct, err := s.pool.Exec(ctx, `DELETE FROM memory_links WHERE key_hash = $1 AND subject = $2`, keyHash, subject)
		if err == nil && ct.RowsAffected() == 0 {
			err = fmt.Errorf("store: memory link: %w", store.ErrNotFound)
		}
		return err
	})
}

// userKey returns the user's key, nil when the user has no memory.
func userKey(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, subject string) ([]byte, error) {
	var key []byte
	err := q.QueryRow(ctx, `SELECT key FROM memory_users WHERE subject = $1`, subject).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return key, err
}

// openTexts opens a memory_texts row into RememberedTexts.
func openTexts(key []byte, subject string, seq int64, sealed []byte) (*store.RememberedTexts, error) {
	ss, err := store.OpenStrings(key, memAAD("memory_texts", subject, seq), sealed)
	if err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, errors.New("store: remembered texts are empty")
	}
	return &store.RememberedTexts{Partner: ss[0], Candidates: ss[1:]}, nil
}

// openPair opens a memory_pairs row.
func openPair(key []byte, subject string, seq, tsNS int64, sealed []byte) (store.Pair, error) {
	ss, err := store.OpenStrings(key, memAAD("memory_pairs", subject, seq), sealed)
	if err != nil {
		return store.Pair{}, err
	}
	if len(ss) != 3 {
		return store.Pair{}, errors.New("store: a remembered pair is malformed")
	}
	return store.Pair{InferenceID: ss[0], At: fromNS(tsNS), Partner: ss[1], Reply: ss[2]}, nil
}

// Inference finds an answered inference by id; see store.Store.
func (s *Store) Inference(id string) (store.Inference, error) {
	var inf store.Inference
	err := s.tx("read inference", func(ctx context.Context, tx pgx.Tx) error {
		var seq, ts int64
		var chars []int32
		var oc outcomeCols
		err := tx.QueryRow(ctx, `SELECT seq, ts_ns, resource_id, subject, prompt_version, candidate_chars, remembered, steer_turn, steer_mode, `+outcomeColumns+`
			FROM logs WHERE inference_id = $1`, id).Scan(append([]any{&seq, &ts, &inf.KeyHash, &inf.Subject, &inf.PromptVersion, &chars, &inf.Remembered,
			&inf.Turn, &inf.SteerMode}, oc.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: inference: %w", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		inf.ID, inf.At, inf.CandidateChars, inf.Outcome = id, fromNS(ts), ints(chars), oc.outcome()
		if !inf.Remembered {
			return nil
		}
		key, err := userKey(ctx, tx, inf.Subject)
		if err != nil || key == nil {
			return err
		}
		var sealed []byte
		err = tx.QueryRow(ctx, `SELECT sealed FROM memory_texts WHERE subject = $1 AND seq = $2`, inf.Subject, seq).Scan(&sealed)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		inf.Texts, err = openTexts(key, inf.Subject, seq, sealed)
		return err
	})
	return inf, err
}

// SetOutcome records an outcome and, for a remembering user, the pair; see
// store.Store.
func (s *Store) SetOutcome(id string, o store.Outcome, reply string) (uint64, error) {
	var rev uint64
	err := s.tx("set outcome", func(ctx context.Context, tx pgx.Tx) error {
		rev = 0
		var seq, ts int64
		var subject string
		var remembered bool
		keys, sel := actions(o)
		err := tx.QueryRow(ctx, `UPDATE logs SET outcome_kind = $2, outcome_rank = $3, outcome_spoken_chars = $4, outcome_keystrokes = $5,
				outcome_ttc_ms = $6, outcome_first_ns = $7, outcome_at_ns = $8, outcome_steer_mode = $9, outcome_keys = $10, outcome_selections = $11
			WHERE inference_id = $1 AND steer_turn = '' RETURNING seq, ts_ns, subject, remembered`,
			id, o.Kind, o.Rank, o.SpokenChars, o.KeystrokesSaved, o.TimeToChoiceMS, nullNS(o.FirstAt), nullNS(o.At), o.SteerMode, keys, sel).Scan(&seq, &ts, &subject, &remembered)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: inference: %w", store.ErrNotFound)
		}
		if err != nil || !remembered {
			return err
		}
		var key []byte
		err = tx.QueryRow(ctx, `SELECT key FROM memory_users WHERE subject = $1 FOR UPDATE`, subject).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		var sealedTexts []byte
		err = tx.QueryRow(ctx, `SELECT sealed FROM memory_texts WHERE subject = $1 AND seq = $2`, subject, seq).Scan(&sealedTexts)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		texts, err := openTexts(key, subject, seq, sealedTexts)
		if err != nil {
			return err
		}
		var last *int64
		if reply != "" {
			sealed, err := store.SealStrings(key, memAAD("memory_pairs", subject, seq), id, texts.Partner, reply)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO memory_pairs (subject, seq, ts_ns, sealed) VALUES ($1, $2, $3, $4)
				ON CONFLICT (subject, seq) DO UPDATE SET sealed = EXCLUDED.sealed`, subject, seq, ts, sealed); err != nil {
				return err
			}
			last = nullNS(o.At)
		} else if _, err := tx.Exec(ctx, `DELETE FROM memory_pairs WHERE subject = $1 AND seq = $2`, subject, seq); err != nil {
			return err
		}
		var r int64
		err = tx.QueryRow(ctx, `UPDATE memory_users SET rev = rev + 1, last_ns = COALESCE($2, last_ns) WHERE subject = $1 RETURNING rev`,
			subject, last).Scan(&r)
		rev = uint64(r)
		return err
	})
	return rev, err
}

// outcomePage is how many outcomes Outcomes reads per query.
const outcomePage = 256

// Outcomes walks the reported outcomes in pages; see store.Store.
func (s *Store) Outcomes(since, until time.Time, fn func(store.OutcomeRecord) error) error {
	afterTS, afterSeq := ns(since), int64(-1)<<62
	for {
		var page []store.OutcomeRecord
		err := s.run("read outcomes", func(ctx context.Context) error {
			page = page[:0]
			rows, err := s.pool.Query(ctx, `SELECT l.seq, l.ts_ns, l.inference_id, l.resource_id, l.subject, l.prompt_version, l.candidate_chars, l.remembered,
					`+columns("l.", outcomeNames)+`, u.key, p.ts_ns, p.sealed
				FROM logs l
				LEFT JOIN memory_users u ON l.remembered AND u.subject = l.subject
				LEFT JOIN memory_pairs p ON l.remembered AND p.subject = l.subject AND p.seq = l.seq
				WHERE l.stream = 'infer' AND l.outcome_kind IS NOT NULL AND (l.ts_ns, l.seq) > ($1, $2) AND l.ts_ns < $3
				ORDER BY l.ts_ns, l.seq LIMIT $4`, afterTS, afterSeq, ns(until), outcomePage)
			if err != nil {
				return err
			}
			var seq, ts int64
			var id string
			var chars []int32
			var oc outcomeCols
			var key, sealed []byte
			var pairTS *int64
			var inf store.Inference
			dest := append([]any{&seq, &ts, &id, &inf.KeyHash, &inf.Subject, &inf.PromptVersion, &chars, &inf.Remembered}, oc.dest()...)
			_, err = pgx.ForEachRow(rows, append(dest, &key, &pairTS, &sealed), func() error {
				r := store.OutcomeRecord{Inference: inf}
				r.Inference.ID, r.Inference.At, r.Inference.CandidateChars, r.Inference.Outcome = id, fromNS(ts), ints(chars), oc.outcome()
				if key != nil && sealed != nil && pairTS != nil {
					p, err := openPair(key, inf.Subject, seq, *pairTS, sealed)
					if err != nil {
						return err
					}
					r.Pair = &p
				}
				page = append(page, r)
				afterTS, afterSeq = ts, seq
				return nil
			})
			return err
		})
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < outcomePage {
			return nil
		}
	}
}

// MemoryUsers lists the users with a memory; see store.Store.
func (s *Store) MemoryUsers() ([]store.MemoryUser, error) {
	out := []store.MemoryUser{}
	err := s.run("read memory users", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT u.subject, u.tag, u.created_ns, u.last_ns, u.rev,
				(SELECT count(*) FROM memory_pairs p WHERE p.subject = u.subject),
				(SELECT coalesce(array_agg(l.key_hash ORDER BY l.key_hash), '{}') FROM memory_links l WHERE l.subject = u.subject)
			FROM memory_users u ORDER BY u.subject`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.MemoryUser, error) {
			var u store.MemoryUser
			var created int64
			var last *int64
			var rev int64
			err := r.Scan(&u.Subject, &u.Tag, &created, &last, &rev, &u.Pairs, &u.Keys)
			if len(u.Keys) == 0 {
				u.Keys = nil
			}
			u.CreatedAt, u.LastAt, u.Rev = fromNS(created), fromNullNS(last), uint64(rev)
			return u, err
		})
		if out == nil {
			out = []store.MemoryUser{}
		}
		return err
	})
	return out, err
}

// MemoryRev reads the user's revision; see store.Store.
func (s *Store) MemoryRev(subject string) (uint64, error) {
	var rev int64
	err := s.run("read memory revision", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `SELECT rev FROM memory_users WHERE subject = $1`, subject).Scan(&rev)
		if errors.Is(err, pgx.ErrNoRows) {
			rev = 0
			return nil
		}
		return err
	})
	return uint64(rev), err
}

// MemoryPairs reads and opens the user's pairs; see store.Store.
func (s *Store) MemoryPairs(subject string) ([]store.Pair, uint64, error) {
	out := []store.Pair{}
	var rev int64
	err := s.tx("read memory pairs", func(ctx context.Context, tx pgx.Tx) error {
		out, rev = []store.Pair{}, 0
		var key []byte
		err := tx.QueryRow(ctx, `SELECT key, rev FROM memory_users WHERE subject = $1`, subject).Scan(&key, &rev)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, ts_ns, sealed FROM memory_pairs WHERE subject = $1 ORDER BY ts_ns, seq`, subject)
		if err != nil {
			return err
		}
		var seq, ts int64
		var sealed []byte
		_, err = pgx.ForEachRow(rows, []any{&seq, &ts, &sealed}, func() error {
			p, err := openPair(key, subject, seq, ts, sealed)
			out = append(out, p)
			return err
		})
		return err
	})
	return out, uint64(rev), err
}

// DeleteUser destroys the user's key, texts and outcomes; see store.Store.
// The texts were only ever stored sealed with the key this deletes.
func (s *Store) DeleteUser(subject string) (store.UserDeletion, error) {
	var d store.UserDeletion
	if subject == "" {
		return d, invalid("empty subject")
	}
	err := s.tx("delete user", func(ctx context.Context, tx pgx.Tx) error {
		d = store.UserDeletion{}
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM memory_pairs WHERE subject = $1), (SELECT count(*) FROM memory_texts WHERE subject = $1)`,
			subject).Scan(&d.Pairs, &d.Pending); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memory_users WHERE subject = $1`, subject) // cascades to pairs and texts
		if err != nil {
			return err
		}
		d.Key = tag.RowsAffected() > 0
		err = tx.QueryRow(ctx, `WITH old AS (
				SELECT seq, outcome_kind IS NOT NULL AS had FROM logs
				WHERE subject = $1 AND (outcome_kind IS NOT NULL OR remembered OR inference_id IS NOT NULL) FOR UPDATE),
			upd AS (
				UPDATE logs SET outcome_kind = NULL, outcome_rank = 0, outcome_spoken_chars = 0, outcome_keystrokes = 0,
					outcome_ttc_ms = -1, outcome_first_ns = NULL, outcome_at_ns = NULL, remembered = false, inference_id = NULL,
					outcome_steer_mode = '', outcome_keys = NULL, outcome_selections = NULL
				FROM old WHERE logs.seq = old.seq RETURNING old.had)
			SELECT count(*) FILTER (WHERE had) FROM upd`, subject).Scan(&d.Outcomes)
		if err != nil {
			return err
		}
		if !d.Key && d.Outcomes == 0 {
			return fmt.Errorf("store: memory user: %w", store.ErrNotFound)
		}
		return nil
	})
	if err != nil || !d.Key {
		return d, err
	}
	start := time.Now()
	d.ScrubProblem = s.scrubMemory()
	d.Scrub = time.Since(start)
	return d, nil
}

// scrubTimeout bounds each step of the clearing after a user's deletion.
const scrubTimeout = 2 * time.Minute

// scrubMemory clears what a deleted user's rows leave in the relation files,
// outside the deletion's transaction (VACUUM cannot run in one).
// memory_users is rewritten with VACUUM FULL: a plain VACUUM leaves the
// bytes of dead rows (the deleted one and every older version of it that an
// update left) in the pages' free space, and the table holds one small row
// per remembering user, so its exclusive lock lasts a moment. The sealed
// texts' space is reclaimed by a plain VACUUM (they were readable only with
// the key). A CHECKPOINT then writes the cleared pages out at once instead
// of at the next scheduled checkpoint. It returns what it could not do (""
// when all went well); the deletion itself stands either way. The
// write-ahead log keeps the old rows until its segments are recycled
// (docs/clustering.md).
func (s *Store) scrubMemory() string {
	var problems []string
	for _, stmt := range []string{"VACUUM (FULL) memory_users", "VACUUM memory_pairs, memory_texts", "CHECKPOINT"} {
		ctx, cancel := context.WithTimeout(context.Background(), scrubTimeout)
		_, err := s.pool.Exec(ctx, stmt)
		cancel()
		if err == nil {
			continue
		}
		var pe *pgconn.PgError
		if stmt == "CHECKPOINT" && errors.As(err, &pe) && pe.Code == "42501" {
			problems = append(problems, "CHECKPOINT is not permitted to this database user (grant it pg_checkpoint), so the cleared pages reach the disk at the next scheduled checkpoint")
			continue
		}
		problems = append(problems, fmt.Sprintf("%s failed: %v", stmt, s.wrap("scrub", err)))
	}
	return strings.Join(problems, "; ")
}

// PruneMemory deletes old pairs, old texts and emptied users; see
// store.Store.
func (s *Store) PruneMemory(pairsBefore, textsBefore time.Time) (store.MemoryPrune, error) {
	var p store.MemoryPrune
	err := s.tx("prune memory", func(ctx context.Context, tx pgx.Tx) error {
		p = store.MemoryPrune{}
		if !pairsBefore.IsZero() {
			if err := tx.QueryRow(ctx, `WITH dead AS (DELETE FROM memory_pairs WHERE ts_ns < $1 RETURNING subject),
					bumped AS (UPDATE memory_users SET rev = rev + 1 WHERE subject IN (SELECT subject FROM dead))
				SELECT count(*) FROM dead`, ns(pairsBefore)).Scan(&p.Pairs); err != nil {
				return err
			}
		}
		if !textsBefore.IsZero() {
			tag, err := tx.Exec(ctx, `DELETE FROM memory_texts WHERE ts_ns < $1`, ns(textsBefore))
			if err != nil {
				return err
			}
			p.Pending = int(tag.RowsAffected())
		}
		cut := textsBefore
		if !pairsBefore.IsZero() && pairsBefore.Before(cut) {
			cut = pairsBefore
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memory_users u WHERE u.created_ns < $1
			AND NOT EXISTS (SELECT 1 FROM memory_pairs p WHERE p.subject = u.subject)
			AND NOT EXISTS (SELECT 1 FROM memory_texts t WHERE t.subject = u.subject)`, ns(cut))
		if err != nil {
			return err
		}
		p.Users = int(tag.RowsAffected())
		return nil
	})
	return p, err
}

func int32s(v []int) []int32 {
	if v == nil {
		return nil
	}
	out := make([]int32, len(v))
	for i, n := range v {
		out[i] = int32(n)
	}
	return out
}

// readMemory reads the outcomes and the memory into snap (Snapshot).
func readMemory(ctx context.Context, tx pgx.Tx, snap *store.Snapshot) error {
	snap.Outcomes, snap.Memory = map[string]store.Outcome{}, []store.MemorySnapshot{}
	rows, err := tx.Query(ctx, `SELECT inference_id, `+outcomeColumns+` FROM logs WHERE inference_id IS NOT NULL AND outcome_kind IS NOT NULL`)
	if err != nil {
		return err
	}
	var id string
	var oc outcomeCols
	if _, err := pgx.ForEachRow(rows, append([]any{&id}, oc.dest()...), func() error {
		snap.Outcomes[id] = *oc.outcome()
		return nil
	}); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT u.subject, u.tag, u.key, u.created_ns, u.last_ns, u.rev,
			(SELECT coalesce(array_agg(l.key_hash ORDER BY l.key_hash), '{}') FROM memory_links l WHERE l.subject = u.subject)
		FROM memory_users u ORDER BY u.subject`)
	if err != nil {
		return err
	}
	byUser := map[string]int{}
	var m store.MemorySnapshot
	var created int64
	var last *int64
	var rev int64
	if _, err := pgx.ForEachRow(rows, []any{&m.Subject, &m.Tag, &m.Key, &created, &last, &rev, &m.Keys}, func() error {
		byUser[m.Subject] = len(snap.Memory)
		snap.Memory = append(snap.Memory, store.MemorySnapshot{Subject: m.Subject, Tag: m.Tag, Keys: keysOrNil(m.Keys), Key: append([]byte(nil), m.Key...),
			CreatedAt: fromNS(created), LastAt: fromNullNS(last), Rev: uint64(rev), Pairs: []store.Pair{}, Texts: map[string]store.RememberedTexts{}})
		return nil
	}); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT subject, seq, ts_ns, sealed FROM memory_pairs ORDER BY subject, ts_ns, seq`)
	if err != nil {
		return err
	}
	var subject string
	var seq, ts int64
	var sealed []byte
	if _, err := pgx.ForEachRow(rows, []any{&subject, &seq, &ts, &sealed}, func() error {
		u := &snap.Memory[byUser[subject]]
		p, err := openPair(u.Key, subject, seq, ts, sealed)
		u.Pairs = append(u.Pairs, p)
		return err
	}); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT t.subject, t.seq, t.sealed, l.inference_id FROM memory_texts t
		JOIN logs l ON l.seq = t.seq WHERE l.inference_id IS NOT NULL`)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, []any{&subject, &seq, &sealed, &id}, func() error {
		u := &snap.Memory[byUser[subject]]
		t, err := openTexts(u.Key, subject, seq, sealed)
		if err != nil {
			return err
		}
		u.Texts[id] = *t
		return nil
	})
	return err
}

// importMemory writes snap's outcomes and memory after its logs (Import).
// A pair whose log entry was pruned gets a negative seq of its own.
func importMemory(ctx context.Context, tx pgx.Tx, snap store.Snapshot) error {
	for id, o := range snap.Outcomes {
		keys, sel := actions(o)
		if _, err := tx.Exec(ctx, `UPDATE logs SET outcome_kind = $2, outcome_rank = $3, outcome_spoken_chars = $4, outcome_keystrokes = $5,
				outcome_ttc_ms = $6, outcome_first_ns = $7, outcome_at_ns = $8, outcome_steer_mode = $9, outcome_keys = $10, outcome_selections = $11
			WHERE inference_id = $1`,
			id, o.Kind, o.Rank, o.SpokenChars, o.KeystrokesSaved, o.TimeToChoiceMS, nullNS(o.FirstAt), nullNS(o.At), o.SteerMode, keys, sel); err != nil {
			return err
		}
	}
	orphan := int64(0)
	for _, m := range snap.Memory {
		if m.Subject == "" || len(m.Key) == 0 {
			return invalid("a memory user with an empty subject or key")
		}
		tag := m.Tag
		if tag == "" {
			tag = m.Subject
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memory_users (subject, key, created_ns, last_ns, rev, tag) VALUES ($1, $2, $3, $4, $5, $6)`,
			m.Subject, m.Key, ns(m.CreatedAt), nullNS(m.LastAt), int64(m.Rev), tag); err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("store: import: memory user repeats: %w", store.ErrInvalid)
			}
			return err
		}
		for _, k := range m.Keys {
			if _, err := tx.Exec(ctx, `INSERT INTO memory_links (key_hash, tag, subject) VALUES ($1, $2, $3)`, k, tag, m.Subject); err != nil {
				if isUniqueViolation(err) {
					return fmt.Errorf("store: import: a key is linked to two memories of one user: %w", store.ErrInvalid)
				}
				return err
			}
		}
		seqOf := func(id string) (int64, bool, error) {
			var seq int64
			err := tx.QueryRow(ctx, `UPDATE logs SET remembered = true WHERE inference_id = $1 RETURNING seq`, id).Scan(&seq)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, false, nil
			}
			return seq, err == nil, err
		}
		for _, p := range m.Pairs {
			seq, ok, err := seqOf(p.InferenceID)
			if err != nil {
				return err
			}
			if !ok {
				orphan--
				seq = orphan
			}
			sealed, err := store.SealStrings(m.Key, memAAD("memory_pairs", m.Subject, seq), p.InferenceID, p.Partner, p.Reply)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO memory_pairs (subject, seq, ts_ns, sealed) VALUES ($1, $2, $3, $4)`, m.Subject, seq, ns(p.At), sealed); err != nil {
				return err
			}
		}
		for id, t := range m.Texts {
			seq, ok, err := seqOf(id)
			if err != nil || !ok {
				return err
			}
			var ts int64
			if err := tx.QueryRow(ctx, `SELECT ts_ns FROM logs WHERE seq = $1`, seq).Scan(&ts); err != nil {
				return err
			}
			sealed, err := store.SealStrings(m.Key, memAAD("memory_texts", m.Subject, seq), append([]string{t.Partner}, t.Candidates...)...)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO memory_texts (subject, seq, ts_ns, sealed) VALUES ($1, $2, $3, $4)`, m.Subject, seq, ts, sealed); err != nil {
				return err
			}
		}
	}
	return nil
}
