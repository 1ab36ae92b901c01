package bolt

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store/storetest"
)

// TestOpenUpgradesSchema3Links: a file of schema 3 kept each memory under
// the user_id's pseudonym alone, readable by every key. Opening it links
// each memory to the keys that wrote it (the keys of the inferences whose
// pairs or awaiting texts it holds), and to no other key.
func TestOpenUpgradesSchema3Links(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	db := MustOpenAt(t, path, Options{})
	storetest.MustInfer(t, db, storetest.Inf{Key: "kA", Subject: "tag-bob", ID: "i1", Version: "1", Cands: []string{"Yes."}, Partner: "Tea?"})
	storetest.MustInfer(t, db, storetest.Inf{At: time.Second, Key: "kB", Subject: "tag-bob", ID: "i2", Version: "1", Cands: []string{"No."}, Partner: "Walk?"})
	storetest.MustInfer(t, db, storetest.Inf{At: 2 * time.Second, Key: "kA", Subject: "tag-ann", ID: "i3", Version: "1", Cands: []string{"Hi."}, Partner: "Hello."})
	storetest.MustInfer(t, db, storetest.Inf{At: 3 * time.Second, Key: "kC", Subject: "tag-bob", ID: "i4", Version: "1", Cands: []string{"Ok."}})
	_, err := db.SetOutcome("i1", storetest.Spoken(1, 4, t0.Add(time.Minute)), "Yes.")
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
