package bolt

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// TestOpenUpgradesSchema3Links: a file of schema 3 kept each memory under
// the user_id's pseudonym alone, readable by every key. Opening it links
// each memory to the keys that wrote it (the keys of the inferences whose
// pairs or awaiting texts it holds), and to no other key.
func TestOpenUpgradesSchema3Links(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	db := MustOpenAt(t, path, Options{})
	MustInfer(t, db, inf{key: "kA", subject: "tag-bob", id: "i1", version: "1", cands: []string{"Yes."}, partner: "Tea?"})
	MustInfer(t, db, inf{at: time.Second, key: "kB", subject: "tag-bob", id: "i2", version: "1", cands: []string{"No."}, partner: "Walk?"})
	MustInfer(t, db, inf{at: 2 * time.Second, key: "kA", subject: "tag-ann", id: "i3", version: "1", cands: []string{"Hi."}, partner: "Hello."})
	MustInfer(t, db, inf{at: 3 * time.Second, key: "kC", subject: "tag-bob", id: "i4", version: "1", cands: []string{"Ok."}})
	_, err := db.SetOutcome("i1", spoken(1, 4, t0.Add(time.Minute)), "Yes.")
	Must(t, err)
	// Make it a schema 3 file: no links, version 3.
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketMemLinks); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketOTPGuards); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(3))
	}))
	Must(t, db.Close())

	db = MustOpenAt(t, path, Options{})
	users, err := db.MemoryUsers()
	Must(t, err)
	want := map[string][]string{"tag-ann": {"kA"}, "tag-bob": {"kA", "kB"}}
	got := map[string][]string{}
	for _, u := range users {
		if u.Tag != u.Subject {
			t.Errorf("an old memory's tag %q is not its subject %q", u.Tag, u.Subject)
		}
		got[u.Subject] = u.Keys
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("links after the upgrade (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{"kA": "tag-bob", "kB": "tag-bob", "kC": ""} {
		if subj, err := db.MemorySubject(key, "tag-bob"); err != nil || subj != want {
			t.Errorf("MemorySubject(%s) = %q, %v; want %q", key, subj, err, want)
		}
	}
}
