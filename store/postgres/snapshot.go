package postgres

import (
	"context"
	"fmt"
	"iter"
	"reflect"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// longTimeout bounds Snapshot and Import, which copy a whole log.
const longTimeout = time.Hour

// runLong is run with longTimeout instead of the per-call timeout.
func (s *Store) runLong(op string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), longTimeout)
	defer cancel()
	return s.wrap(op, fn(ctx))
}

// Snapshot reads everything in one REPEATABLE READ, read-only transaction:
// one consistent view however long fn takes; see store.Store.
func (s *Store) Snapshot(fn func(store.Snapshot) error) error {
	return s.runLong("snapshot", func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			snap, err := readSnapshot(ctx, tx)
			if err != nil {
				return err
			}
			snap.Logs = func(yield func(store.LogEntry, error) bool) {
				rows, err := tx.Query(ctx, "SELECT "+logCols+" FROM logs ORDER BY ts_ns, seq")
				if err != nil {
					yield(store.LogEntry{}, err)
					return
				}
				defer rows.Close()
				for rows.Next() {
					e, err := scanLog(rows)
					if err != nil {
						yield(store.LogEntry{}, err)
						return
					}
					if !yield(e, nil) {
						return
					}
				}
				if err := rows.Err(); err != nil {
					yield(store.LogEntry{}, err)
				}
			}
			return fn(snap)
		})
	})
}

// readSnapshot reads everything but the logs.
func readSnapshot(ctx context.Context, tx pgx.Tx) (store.Snapshot, error) {
	snap := store.Snapshot{}
	settings, err := queryAll(ctx, tx, func(r pgx.CollectableRow) ([2]string, error) {
		var kv [2]string
		return kv, r.Scan(&kv[0], &kv[1])
	}, "SELECT name, value FROM settings")
	if err != nil {
		return snap, err
	}
	for _, kv := range settings {
		switch kv[0] {
		case settingAdminKeyHash:
			snap.AdminKeyHash = kv[1]
		case settingTOTPLastStep:
			n, err := strconv.ParseInt(kv[1], 10, 64)
			if err != nil {
				return snap, fmt.Errorf("decode %s: %w", kv[0], err)
			}
			snap.TOTPLastStep = n
		}
	}
	if snap.Keys, err = queryAll(ctx, tx, asRow(scanKey), "SELECT "+keyCols+" FROM api_keys ORDER BY seq"); err != nil {
		return snap, err
	}
	if snap.Prompts, err = queryAll(ctx, tx, scanPrompt, "SELECT prompt, version, created_ns FROM prompts ORDER BY seq"); err != nil {
		return snap, err
	}
	snap.Sessions, err = queryAll(ctx, tx, func(r pgx.CollectableRow) (store.Session, error) {
		var ss store.Session
		var exp int64
		err := r.Scan(&ss.TokenHash, &exp)
		ss.ExpiresAt = fromNS(exp)
		return ss, err
	}, "SELECT token_hash, expires_ns FROM sessions ORDER BY token_hash")
	if err != nil {
		return snap, err
	}
	rows, err := tx.Query(ctx, "SELECT name, value FROM secrets")
	if err != nil {
		return snap, err
	}
	snap.Secrets = map[string][]byte{}
	var name string
	var value []byte
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		snap.Secrets[name] = append([]byte(nil), value...)
		return nil
	}); err != nil {
		return snap, err
	}
	snap.OTPCodes, err = queryAll(ctx, tx, func(r pgx.CollectableRow) (store.OTPCode, error) {
		var o store.OTPCode
		var issued, expires int64
		err := r.Scan(&o.Scope, &o.Hash, &issued, &expires)
		o.IssuedAt, o.ExpiresAt = fromNS(issued), fromNS(expires)
		return o, err
	}, "SELECT scope, hash, issued_ns, expires_ns FROM otp_codes ORDER BY scope")
	if err != nil {
		return snap, err
	}
	if rows, err = tx.Query(ctx, "SELECT scope, fails, level, last_fail_ns, locked_until_ns, sources FROM otp_guards ORDER BY scope"); err != nil {
		return snap, err
	}
	var scope string
	for rows.Next() {
		g, err := scanOTPGuard(rows, &scope)
		if err != nil {
			rows.Close()
			return snap, err
		}
		if scope == "" {
			snap.OTPGuard = g
			continue
		}
		if snap.OTPGuards == nil {
			snap.OTPGuards = map[string]store.OTPGuard{}
		}
		snap.OTPGuards[scope] = g
	}
	if err := rows.Err(); err != nil {
		return snap, err
	}
	snap.Pairings, err = queryAll(ctx, tx, func(r pgx.CollectableRow) (store.Pairing, error) {
		var p store.Pairing
		var created, expires int64
		var used *int64
		var keyHash *string
		err := r.Scan(&p.CodeHash, &p.Key.ClientID, &p.Key.Status, &p.Key.Scopes, &p.Key.RateLimitPerMinute, &created, &expires, &used, &keyHash, &p.MemorySubject)
		p.CreatedAt, p.ExpiresAt, p.UsedAt = fromNS(created), fromNS(expires), fromNullNS(used)
		if keyHash != nil {
			p.KeyHash = *keyHash
		}
		return p, err
	}, `SELECT code_hash, client_id, status, scopes, rate_limit_per_minute, created_ns, expires_ns, used_ns, key_hash, memory_subject
		FROM pairings ORDER BY code_hash`)
	if err != nil {
		return snap, err
	}
	if snap.LiveOff, err = queryAll(ctx, tx, pgx.RowTo[string], "SELECT key_hash FROM live_off ORDER BY key_hash"); err != nil {
		return snap, err
	}
	if snap.ModelChoices, err = modelChoices(ctx, tx); err != nil {
		return snap, err
	}
	if snap.ModelRecords, err = modelRecords(ctx, tx, ""); err != nil {
		return snap, err
	}
	if err := readMemory(ctx, tx, &snap); err != nil {
		return snap, err
	}
	return snap, nil
}

// dataTables are the tables Import empties with replace (rate_windows
// holds no data worth keeping, but a fresh start should not inherit it).
const dataTables = "settings, secrets, api_keys, prompts, otp_codes, otp_guards, sessions, pairings, logs, rate_windows, rate_buckets, memory_links, memory_pairs, memory_texts, memory_users, live_tickets, live_off, model_choices, model_records"

// Import writes snap in one transaction; see store.Store. Logs go in with
// COPY, streamed from snap.Logs.
func (s *Store) Import(snap store.Snapshot, replace bool) error {
	return s.runLong("import", func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var held bool
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM settings) OR EXISTS (SELECT 1 FROM api_keys)
				OR EXISTS (SELECT 1 FROM prompts) OR EXISTS (SELECT 1 FROM otp_codes) OR EXISTS (SELECT 1 FROM otp_guards)
				OR EXISTS (SELECT 1 FROM sessions) OR EXISTS (SELECT 1 FROM logs)
				OR EXISTS (SELECT 1 FROM secrets) OR EXISTS (SELECT 1 FROM memory_users)
				OR EXISTS (SELECT 1 FROM pairings) OR EXISTS (SELECT 1 FROM live_off)
				OR EXISTS (SELECT 1 FROM model_choices) OR EXISTS (SELECT 1 FROM model_records)`).Scan(&held)
			if err != nil {
				return err
			}
			if held && !replace {
				return fmt.Errorf("store: import into %s: it already holds data: %w", s.desc, store.ErrExists)
			}
			if held || replace {
				if _, err := tx.Exec(ctx, "TRUNCATE "+dataTables+" RESTART IDENTITY"); err != nil {
					return err
				}
			}
			return importInto(ctx, tx, snap)
		})
	})
}

// importInto writes snap into empty tables.
func importInto(ctx context.Context, tx pgx.Tx, snap store.Snapshot) error {
	batch := &pgx.Batch{}
	for name, v := range snap.Secrets {
		if name == "" || len(v) == 0 {
			return invalid("a secret with an empty name or value")
		}
		batch.Queue("INSERT INTO secrets (name, value) VALUES ($1, $2)", name, v)
	}
	if snap.AdminKeyHash != "" {
		batch.Queue("INSERT INTO settings (name, value) VALUES ($1, $2)", settingAdminKeyHash, snap.AdminKeyHash)
	}
	if snap.TOTPLastStep > 0 {
		batch.Queue("INSERT INTO settings (name, value) VALUES ($1, $2)", settingTOTPLastStep, strconv.FormatInt(snap.TOTPLastStep, 10))
	}
	guards := map[string]store.OTPGuard{}
	for scope, g := range snap.OTPGuards {
		if scope == "" {
			return invalid("a scoped login guard with an empty scope")
		}
		guards[scope] = g
	}
	if g := snap.OTPGuard; !reflect.DeepEqual(g, store.OTPGuard{}) {
		guards[""] = g
	}
	for scope, g := range guards {
		batch.Queue("INSERT INTO otp_guards (scope, fails, level, last_fail_ns, locked_until_ns, sources) VALUES ($1, $2, $3, $4, $5, $6)",
			scope, g.Fails, g.Level, zeroNS(g.LastFail), zeroNS(g.LockedUntil), nonNil(g.Sources))
	}
	for _, o := range snap.OTPCodes {
		if o.Scope == "" || o.Hash == "" {
			return invalid("a login code with an empty scope or hash")
		}
		batch.Queue("INSERT INTO otp_codes (scope, hash, issued_ns, expires_ns) VALUES ($1, $2, $3, $4)", o.Scope, o.Hash, ns(o.IssuedAt), ns(o.ExpiresAt))
	}
	for _, k := range snap.Keys {
		if k.Hash == "" {
			return invalid("a key with an empty hash")
		}
		batch.Queue(`INSERT INTO api_keys (hash, client_id, status, scopes, rate_limit_per_minute, created_ns, revoked_ns, last_used_ns)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, k.Hash, k.ClientID, k.Status, k.Scopes, k.RateLimitPerMinute, ns(k.CreatedAt), nullNS(k.RevokedAt), nullNS(k.LastUsedAt))
	}
	for _, p := range snap.Prompts {
		if p.Version == "" {
			return invalid("a prompt with an empty version")
		}
		batch.Queue("INSERT INTO prompts (version, prompt, created_ns) VALUES ($1, $2, $3)", p.Version, p.Prompt, ns(p.CreatedAt))
	}
	for _, ss := range snap.Sessions {
		batch.Queue("INSERT INTO sessions (token_hash, expires_ns) VALUES ($1, $2)", ss.TokenHash, ns(ss.ExpiresAt))
	}
	for _, p := range snap.Pairings {
		if p.CodeHash == "" {
			return invalid("a pairing with an empty code hash")
		}
		var keyHash *string
		if p.KeyHash != "" {
			keyHash = &p.KeyHash
		}
		batch.Queue(`INSERT INTO pairings (code_hash, client_id, status, scopes, rate_limit_per_minute, created_ns, expires_ns, used_ns, key_hash, memory_subject)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, p.CodeHash, p.Key.ClientID, p.Key.Status, p.Key.Scopes, p.Key.RateLimitPerMinute,
			ns(p.CreatedAt), ns(p.ExpiresAt), nullNS(p.UsedAt), keyHash, p.MemorySubject)
	}
	for _, h := range snap.LiveOff {
		if h == "" {
			return invalid("a live-off key hash is empty")
		}
		batch.Queue("INSERT INTO live_off (key_hash) VALUES ($1) ON CONFLICT DO NOTHING", h)
	}
	for _, c := range snap.ModelChoices {
		if !store.ValidModelChoice(c) {
			return invalid("a model choice without a node, a kind or a model")
		}
		batch.Queue("INSERT INTO model_choices (node, kind, model, previous, at_ns) VALUES ($1, $2, $3, $4, $5)", c.Node, c.Kind, c.Model, c.Previous, ns(c.At))
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("store: import: a key, prompt version, session or pairing repeats: %w", store.ErrInvalid)
		}
		return err
	}
	for _, r := range snap.ModelRecords {
		if !store.ValidModelRecord(r) {
			return invalid("a model record without a node, a file, a kind or a body")
		}
		if err := putModelRecord(ctx, tx, r); err != nil {
			return err
		}
	}
	if snap.Logs != nil {
		next, stop := iter.Pull2(snap.Logs)
		defer stop()
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"logs"},
			[]string{"ts_ns", "level", "message", "resource_type", "resource_id", "stream", "subject", "status", "latency_ms", "node",
				"error_code", "inference_id", "prompt_version", "candidate_chars", "steer_turn", "steer_mode", "model", "speech_model"},
			pgx.CopyFromFunc(func() ([]any, error) {
				e, err, ok := next()
				if !ok || err != nil {
					return nil, err
				}
				c := inferenceColsOf(e)
				return []any{ns(e.Timestamp), e.Level, e.Message, e.ResourceType, e.ResourceID, e.StreamName, e.Subject, e.Status, e.LatencyMS, e.Node,
					e.ErrorCode, c.id, c.version, c.chars, c.turn, c.mode, c.model, c.speech}, nil
			}))
		if err != nil {
			return err
		}
	}
	return importMemory(ctx, tx, snap)
}
