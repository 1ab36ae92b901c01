package bolt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/replyd/replyd/internal/secret"

	"github.com/replyd/replyd/store"
)

// TestSecretsInBackup: the installation secrets travel inside the file, so
// a backup carries them (the behaviour of the secrets is storetest's).
func TestSecretsInBackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	db, err := Open(path, Options{})
	Must(t, err)
	a, err := db.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	Must(t, db.SetSecret(store.SecretTOTP, []byte("totp secret")))
	var backup bytes.Buffer
	if _, err := db.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	Must(t, db.SetSecret(store.SecretTOTP, nil))
	Must(t, db.Close())

	restored := filepath.Join(t.TempDir(), "restored.db")
	Must(t, os.WriteFile(restored, backup.Bytes(), 0o600))
	db2 := MustOpenAt(t, restored, Options{})
	c, err := db2.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	if !bytes.Equal(a, c) {
		t.Fatal("the restored backup has another pseudonym key")
	}
	if v, ok, _ := db2.Secret(store.SecretTOTP); !ok || string(v) != "totp secret" {
		t.Fatal("the backup lost the TOTP secret")
	}
}

// TestMigratePseudonyms writes infer entries the way schema 1 did (the bare
// SHA-256 of user_id as Subject) and checks that reopening turns them into
// keyed pseudonyms, leaves key-hash subjects alone and keeps the counts.
func TestMigratePseudonyms(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	c := &clock{t: t0}
	db, err := Open(path, Options{Now: c.Now})
	Must(t, err)
	keyHash := secret.Hash("rpd_some-key")
	var entries []store.LogEntry
	for i, u := range []string{"patient-0001", "patient-0002", "patient-0001"} {
		entries = append(entries, store.LogEntry{Timestamp: t0.Add(timeStep(i)), Subject: secret.Hash(u)})
	}
	// A request without user_id: the subject is the key hash.
	entries = append(entries, store.LogEntry{Timestamp: t0.Add(timeStep(9)), Subject: keyHash})
	// Many more, so that the migration crosses its batch size.
	for i := 0; i < 2500; i++ {
		entries = append(entries, store.LogEntry{Timestamp: t0.Add(timeStep(10 + i)), Subject: secret.Hash("bulk")})
	}
	// One transaction (AppendLog would fsync each).
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error {
		for _, e := range entries {
			e.Level, e.Message, e.ResourceType, e.ResourceID, e.StreamName = store.LevelInfo, "infer ok", store.ResourceAPIKey, keyHash, store.StreamInfer
			val, _ := json.Marshal(e)
			seq, _ := tx.Bucket(bucketLogs).NextSequence()
			k := timeKey(e.Timestamp, seq)
			if err := tx.Bucket(bucketLogs).Put(k, val); err != nil {
				return err
			}
			if err := tx.Bucket(bucketInferIdx).Put(k, []byte(e.Subject)); err != nil {
				return err
			}
		}
		return nil
	}))
	before, err := db.Stats(t0, t0.Add(timeStep(5000)))
	Must(t, err)
	// Make it a schema 1 file again: version 1, no secrets bucket.
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketSecrets); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(1))
	}))
	Must(t, db.Close())

	// A read-only open of the old file works (replyd check, backup).
	ro, err := Open(path, Options{ReadOnly: true})
	Must(t, err)
	Must(t, ro.Close())

	db = MustOpenAt(t, path, Options{Now: c.Now})
	key, err := db.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	migrated, err := db.Logs(store.LogQuery{Since: t0, Stream: store.StreamInfer})
	Must(t, err)
	got := map[string]int{}
	for _, e := range migrated {
		got[e.Subject]++
	}
	want := map[string]int{
		secret.Pseudonym(key, "patient-0001"): 2,
		secret.Pseudonym(key, "patient-0002"): 1,
		secret.Pseudonym(key, "bulk"):         2500,
		keyHash:                               1,
	}
	if len(got) != len(want) {
		t.Fatalf("subjects after migration: %v", got)
	}
	for s, n := range want {
		if got[s] != n {
			t.Errorf("subject %s: %d entries, want %d", s[:12], got[s], n)
		}
	}
	after, err := db.Stats(t0, t0.Add(timeStep(5000)))
	Must(t, err)
	if !reflect.DeepEqual(after, before) {
		t.Errorf("stats %+v after the migration, %+v before", after, before)
	}
	var version uint64
	Must(t, db.bolt.View(func(tx *bolt.Tx) error {
		version = keyNanos(tx.Bucket(bucketMeta).Get(metaSchemaVersion))
		return nil
	}))
	if version != SchemaVersion {
		t.Errorf("schema version %d after the migration, want %d", version, SchemaVersion)
	}
}

// timeStep is the i-th second after t0.
func timeStep(i int) time.Duration { return time.Duration(i) * time.Second }

func TestPruneLogsToSize(t *testing.T) {
	db, _ := MustOpen(t)
	keyHash := secret.Hash("k")
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error {
		for i := 0; i < 20000; i++ {
			e := store.LogEntry{Timestamp: t0.Add(timeStep(i)), Level: store.LevelInfo, Message: "infer ok: 3 candidates in 812 ms (audio 4.1 s)",
				ResourceType: store.ResourceAPIKey, ResourceID: keyHash, StreamName: store.StreamInfer, Subject: keyHash, Status: 200, LatencyMS: 812}
			val, _ := json.Marshal(e)
			seq, _ := tx.Bucket(bucketLogs).NextSequence()
			k := timeKey(e.Timestamp, seq)
			if err := tx.Bucket(bucketLogs).Put(k, val); err != nil {
				return err
			}
			if err := tx.Bucket(bucketInferIdx).Put(k, []byte(keyHash)); err != nil {
				return err
			}
		}
		return nil
	}))
	size, n, err := db.LogBytes()
	Must(t, err)
	if n != 20000 || size < 4<<20 {
		t.Fatalf("LogBytes = %d bytes, %d entries", size, n)
	}
	const max = 1 << 20
	deleted, err := db.PruneLogsToSize(max, 500)
	Must(t, err)
	size, n, err = db.LogBytes()
	Must(t, err)
	if size > max || deleted+n != 20000 || n < 1000 {
		t.Fatalf("after pruning to %d bytes: %d bytes, %d entries left, %d deleted", max, size, n, deleted)
	}
	// The oldest went first: what is left is the newest n.
	left, err := db.Logs(store.LogQuery{})
	Must(t, err)
	if !left[len(left)-1].Timestamp.Equal(t0.Add(timeStep(20000 - n))) {
		t.Errorf("oldest entry left is %s, want %s", left[len(left)-1].Timestamp, t0.Add(timeStep(20000-n)))
	}
	if d, err := db.PruneLogsToSize(max, 500); err != nil || d != 0 {
		t.Errorf("a second prune deleted %d (%v)", d, err)
	}
}
