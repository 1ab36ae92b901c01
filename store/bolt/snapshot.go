package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// noLogs is the Logs of a snapshot without entries.
func noLogs(func(store.LogEntry, error) bool) {}

// Snapshot reads everything in one read transaction; see Store.
func (db *DB) Snapshot(fn func(store.Snapshot) error) error {
	return db.view(func(tx *bolt.Tx) error {
		snap := store.Snapshot{Keys: []store.APIKey{}, Prompts: []store.PromptVersion{}, Sessions: []store.Session{}, Secrets: map[string][]byte{},
			Outcomes: map[string]store.Outcome{}, Memory: []store.MemorySnapshot{}, Pairings: []store.Pairing{}}
		var err error
		if snap.Pairings, err = listJSON[store.Pairing](tx.Bucket(bucketPairings), nil, "pairing"); err != nil {
			return err
		}
		snap.LiveOff = []string{}
		if b := tx.Bucket(bucketLiveOff); b != nil {
			_ = b.ForEach(func(k, _ []byte) error {
				snap.LiveOff = append(snap.LiveOff, string(k))
				return nil
			})
		}
		if err := snapshotOutcomes(tx, &snap); err != nil {
			return err
		}
		if snap.ModelChoices, err = modelChoices(tx); err != nil {
			return err
		}
		if snap.ModelRecords, err = modelRecords(tx, nil); err != nil {
			return err
		}
		if b := tx.Bucket(bucketSecrets); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				snap.Secrets[string(k)] = append([]byte(nil), v...)
				return nil
			})
			if err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		snap.AdminKeyHash = string(meta.Get(metaAdminKeyHash))
		if v := meta.Get(metaTOTPLastStep); len(v) == 8 {
			snap.TOTPLastStep = int64(binary.BigEndian.Uint64(v))
		}
		if snap.OTPGuard, err = getOTPGuard(tx, ""); err != nil {
			return err
		}
		if snap.OTPGuards, err = otpGuards(tx); err != nil {
			return err
		}
		snap.OTPCodes = []store.OTPCode{}
		err = eachJSON(tx.Bucket(bucketOTP), nil, "OTP", func(k []byte, rec otpRecord) error {
			snap.OTPCodes = append(snap.OTPCodes, store.OTPCode{Scope: string(k), Hash: rec.Hash, IssuedAt: rec.IssuedAt, ExpiresAt: rec.ExpiresAt})
			return nil
		})
		if err != nil {
			return err
		}
		// Keys in creation order, so that an importer that numbers them
		// keeps ListKeys' order for keys created in the same nanosecond.
		c := tx.Bucket(bucketKeysByAge).Cursor()
		for k, hash := c.First(); k != nil; k, hash = c.Next() {
			key, err := getKey(tx, string(hash))
			if err != nil {
				return err
			}
			snap.Keys = append(snap.Keys, key)
		}
		if snap.Prompts, err = listJSON[store.PromptVersion](tx.Bucket(bucketPrompts), nil, "prompt"); err != nil {
			return err
		}
		err = tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			if len(v) == 8 {
				snap.Sessions = append(snap.Sessions, store.Session{TokenHash: string(k), ExpiresAt: time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()})
			}
			return nil
		})
		if err != nil {
			return err
		}
		snap.Logs = func(yield func(store.LogEntry, error) bool) {
			c := tx.Bucket(bucketLogs).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				var e store.LogEntry
				if err := json.Unmarshal(v, &e); err != nil {
					yield(store.LogEntry{}, fmt.Errorf("store: decode log entry: %w", err))
					return
				}
				if !yield(e, nil) {
					return
				}
			}
		}
		return fn(snap)
	})
}

// empty reports whether tx holds no data (the schema version aside).
func empty(tx *bolt.Tx) bool {
	for _, name := range allBuckets {
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		if bytes.Equal(name, bucketMeta) {
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if !bytes.Equal(k, metaSchemaVersion) {
					return false
				}
			}
			continue
		}
		if k, _ := b.Cursor().First(); k != nil {
			return false
		}
	}
	return true
}

// Import writes snap in one transaction; see Store.
func (db *DB) Import(snap store.Snapshot, replace bool) error {
	if snap.Logs == nil {
		snap.Logs = noLogs
	}
	return db.update(func(tx *bolt.Tx) error {
		if !empty(tx) {
			if !replace {
				return fmt.Errorf("store: import into %s: it already holds data: %w", db.path, store.ErrExists)
			}
			for _, name := range allBuckets {
				if err := tx.DeleteBucket(name); err != nil {
					return err
				}
			}
			if err := initSchema(tx); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		for _, c := range snap.ModelChoices {
			if !store.ValidModelChoice(c) {
				return invalid("a model choice without a node, a kind or a model")
			}
			v, err := json.Marshal(c)
			if err != nil {
				return err
			}
			if err := putModelChoice(tx, c.Node, c.Kind, v); err != nil {
				return err
			}
		}
		for _, r := range snap.ModelRecords {
			if !store.ValidModelRecord(r) {
				return invalid("a model record without a node, a file, a kind or a body")
			}
			if err := putModelRecord(tx, r); err != nil {
				return err
			}
		}
		for name, v := range snap.Secrets {
			if name == "" || len(v) == 0 {
				return invalid("a secret with an empty name or value")
			}
			if err := tx.Bucket(bucketSecrets).Put([]byte(name), v); err != nil {
				return err
			}
		}
		if snap.AdminKeyHash != "" {
			if err := meta.Put(metaAdminKeyHash, []byte(snap.AdminKeyHash)); err != nil {
				return err
			}
		}
		if snap.TOTPLastStep > 0 {
			if err := meta.Put(metaTOTPLastStep, u64(uint64(snap.TOTPLastStep))); err != nil {
				return err
			}
		}
		if !reflect.DeepEqual(snap.OTPGuard, store.OTPGuard{}) {
			if err := putOTPGuard(tx, "", snap.OTPGuard); err != nil {
				return err
			}
		}
		for scope, g := range snap.OTPGuards {
			if scope == "" {
				return invalid("a scoped login guard with an empty scope")
			}
			if err := putOTPGuard(tx, scope, g); err != nil {
				return err
			}
		}
		for _, o := range snap.OTPCodes {
			if o.Scope == "" || o.Hash == "" {
				return invalid("a login code with an empty scope or hash")
			}
			val, err := json.Marshal(otpRecord{Hash: o.Hash, IssuedAt: o.IssuedAt, ExpiresAt: o.ExpiresAt})
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketOTP).Put([]byte(o.Scope), val); err != nil {
				return err
			}
		}
		byAge := tx.Bucket(bucketKeysByAge)
		for _, k := range snap.Keys {
			if k.Hash == "" {
				return invalid("a key with an empty hash")
			}
			if tx.Bucket(bucketKeys).Get([]byte(k.Hash)) != nil {
				return invalid("key %s repeats", shortHash(k.Hash))
			}
			if err := putKey(tx, k); err != nil {
				return err
			}
			seq, err := byAge.NextSequence()
			if err != nil {
				return err
			}
			if err := byAge.Put(timeKey(k.CreatedAt, seq), []byte(k.Hash)); err != nil {
				return err
			}
		}
		prompts, idx := tx.Bucket(bucketPrompts), tx.Bucket(bucketPromptIdx)
		for _, p := range snap.Prompts {
			if p.Version == "" || idx.Get([]byte(p.Version)) != nil {
				return invalid("prompt version %q is empty or repeated", p.Version)
			}
			n, err := prompts.NextSequence()
			if err != nil {
				return err
			}
			val, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if err := prompts.Put(u64(n), val); err != nil {
				return err
			}
			if err := idx.Put([]byte(p.Version), u64(n)); err != nil {
				return err
			}
			if err := meta.Put(metaPromptCurrent, u64(n)); err != nil {
				return err
			}
		}
		for _, s := range snap.Sessions {
			if err := tx.Bucket(bucketSessions).Put([]byte(s.TokenHash), u64(nanos(s.ExpiresAt))); err != nil {
				return err
			}
		}
		for _, p := range snap.Pairings {
			if p.CodeHash == "" || tx.Bucket(bucketPairings).Get([]byte(p.CodeHash)) != nil {
				return invalid("a pairing code hash is empty or repeated")
			}
			val, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketPairings).Put([]byte(p.CodeHash), val); err != nil {
				return err
			}
		}
		for _, h := range snap.LiveOff {
			if h == "" {
				return invalid("a live-off key hash is empty")
			}
			if err := tx.Bucket(bucketLiveOff).Put([]byte(h), nil); err != nil {
				return err
			}
		}
		now := db.now()
		logKeys := map[string][]byte{} // inference id -> its new log key
		for e, err := range snap.Logs {
			if err != nil {
				return err
			}
			val, err := json.Marshal(e)
			if err != nil {
				return err
			}
			k, err := putLogKey(tx, e, val, now)
			if err != nil {
				return err
			}
			if e.Inference != nil && e.Inference.ID != "" {
				logKeys[e.Inference.ID] = k
			}
		}
		return importOutcomes(tx, snap, logKeys)
	})
}
