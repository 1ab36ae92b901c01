package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

func keyHashes(ks []store.APIKey) []string {
	out := []string{}
	for _, k := range ks {
		out = append(out, k.Hash)
	}
	return out
}

func listKeys(t *testing.T, s store.Store, limit int, rev bool) []string {
	t.Helper()
	ks, err := s.ListKeys(limit, rev)
	Must(t, err)
	return keyHashes(ks)
}

func keysLifecycle(t *testing.T, e Env) {
	s := e.S
	a := MustCreateKey(t, s, "aaaa", T0)
	MustCreateKey(t, s, "bbbb", T0.Add(time.Minute))
	MustCreateKey(t, s, "cccc", T0.Add(2*time.Minute))

	wantErr(t, "duplicate CreateKey", s.CreateKey(store.APIKey{Hash: "bbbb"}), store.ErrExists)
	got, err := s.GetKey("aaaa")
	Must(t, err)
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("GetKey (-want +got):\n%s", diff)
	}
	_, err = s.GetKey("nope")
	wantErr(t, "GetKey(unknown)", err, store.ErrNotFound)

	if diff := cmp.Diff([]string{"cccc", "bbbb", "aaaa"}, listKeys(t, s, 0, false)); diff != "" {
		t.Errorf("ListKeys newest first (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "bbbb"}, listKeys(t, s, 2, false)); diff != "" {
		t.Errorf("ListKeys limit 2 (-want +got):\n%s", diff)
	}

	revokedAt := T0.Add(time.Hour)
	r, err := s.RevokeKey("bbbb", revokedAt)
	Must(t, err)
	if r.Status != store.StatusRevoked || !r.RevokedAt.Equal(revokedAt) || r.ClientID != "client-bbbb" {
		t.Errorf("RevokeKey = %+v", r)
	}
	// Idempotent: the first RevokedAt stays.
	r2, err := s.RevokeKey("bbbb", revokedAt.Add(time.Hour))
	Must(t, err)
	if diff := cmp.Diff(r, r2); diff != "" {
		t.Errorf("second RevokeKey changed the record (-first +second):\n%s", diff)
	}
	if g, _ := s.GetKey("bbbb"); g.Status != store.StatusRevoked || !g.RevokedAt.Equal(revokedAt) {
		t.Errorf("GetKey after revoke = %+v", g)
	}
	_, err = s.RevokeKey("nope", revokedAt)
	wantErr(t, "RevokeKey(unknown)", err, store.ErrNotFound)
	if diff := cmp.Diff([]string{"cccc", "aaaa"}, listKeys(t, s, 0, false)); diff != "" {
		t.Errorf("ListKeys without revoked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "bbbb", "aaaa"}, listKeys(t, s, 0, true)); diff != "" {
		t.Errorf("ListKeys with revoked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "aaaa"}, listKeys(t, s, 2, false)); diff != "" {
		t.Errorf("ListKeys limit counts only returned keys (-want +got):\n%s", diff)
	}
	// A key created revoked is listed only with include_revoked.
	Must(t, s.CreateKey(store.APIKey{Hash: "dddd", Status: store.StatusRevoked, CreatedAt: T0.Add(3 * time.Minute), RevokedAt: T0.Add(3 * time.Minute)}))
	if diff := cmp.Diff([]string{"cccc", "aaaa"}, listKeys(t, s, 0, false)); diff != "" {
		t.Errorf("ListKeys after creating a revoked key (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"dddd", "cccc"}, listKeys(t, s, 2, true)); diff != "" {
		t.Errorf("ListKeys with revoked, limit 2 (-want +got):\n%s", diff)
	}
}

func keysCreateDefaults(t *testing.T, e Env) {
	Must(t, e.S.CreateKey(store.APIKey{Hash: "h"}))
	k, err := e.S.GetKey("h")
	Must(t, err)
	want := store.APIKey{Hash: "h", Status: store.StatusActive, CreatedAt: T0}
	if diff := cmp.Diff(want, k); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func keysCreateInvalid(t *testing.T, e Env) {
	wantErr(t, "CreateKey with empty hash", e.S.CreateKey(store.APIKey{ClientID: "x"}), store.ErrInvalid)
	if ks := listKeys(t, e.S, 0, true); len(ks) != 0 {
		t.Errorf("a rejected key was stored: %v", ks)
	}
}

func keysSameNanosecond(t *testing.T, e Env) {
	for _, h := range []string{"k1", "k2", "k3", "k4"} {
		MustCreateKey(t, e.S, h, T0)
	}
	if diff := cmp.Diff([]string{"k4", "k3", "k2", "k1"}, listKeys(t, e.S, 0, false)); diff != "" {
		t.Errorf("same CreatedAt: last created first (-want +got):\n%s", diff)
	}
}

func keysRoundTrip(t *testing.T, e Env) {
	k := store.APIKey{
		Hash: "f00d", ClientID: "ward 3 — tablet «A»", Status: store.StatusActive,
		Scopes: []string{"infer", "other"}, RateLimitPerMinute: 7,
		CreatedAt: T0.Add(123456789 * time.Nanosecond), LastUsedAt: time.Time{},
	}
	Must(t, e.S.CreateKey(k))
	got, err := e.S.GetKey("f00d")
	Must(t, err)
	if diff := cmp.Diff(k, got); diff != "" {
		t.Errorf("GetKey (-want +got):\n%s", diff)
	}
	ks, err := e.S.ListKeys(0, true)
	Must(t, err)
	if diff := cmp.Diff([]store.APIKey{k}, ks); diff != "" {
		t.Errorf("ListKeys (-want +got):\n%s", diff)
	}
	// Times before 1970 and far in the future survive too.
	old := store.APIKey{Hash: "01d", Status: store.StatusRevoked, Scopes: []string{}, CreatedAt: time.Date(1969, 7, 20, 20, 17, 0, 1, time.UTC), RevokedAt: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}
	Must(t, e.S.CreateKey(old))
	got, err = e.S.GetKey("01d")
	Must(t, err)
	if !got.CreatedAt.Equal(old.CreatedAt) || !got.RevokedAt.Equal(old.RevokedAt) || got.Status != store.StatusRevoked {
		t.Errorf("GetKey(old) = %+v, want %+v", got, old)
	}
}

func keysEmptyList(t *testing.T, e Env) {
	ks, err := e.S.ListKeys(10, true)
	Must(t, err)
	if ks == nil || len(ks) != 0 {
		t.Errorf("ListKeys on an empty store = %#v, want an empty non-nil slice", ks)
	}
}

func keysTouchThrottled(t *testing.T, e Env) {
	s := e.S
	MustCreateKey(t, s, "k", T0)
	lastUsed := func() time.Time {
		t.Helper()
		k, err := s.GetKey("k")
		Must(t, err)
		return k.LastUsedAt
	}
	Must(t, s.TouchKey("k", T0.Add(time.Second)))
	if got := lastUsed(); !got.Equal(T0.Add(time.Second)) {
		t.Fatalf("first touch: LastUsedAt = %v", got)
	}
	// Within a minute of the last write nothing is written.
	Must(t, s.TouchKey("k", T0.Add(50*time.Second)))
	if got := lastUsed(); !got.Equal(T0.Add(time.Second)) {
		t.Errorf("throttled touch wrote: LastUsedAt = %v", got)
	}
	Must(t, s.TouchKey("k", T0.Add(61*time.Second)))
	if got := lastUsed(); !got.Equal(T0.Add(61 * time.Second)) {
		t.Errorf("touch after a minute: LastUsedAt = %v", got)
	}
	wantErr(t, "TouchKey(unknown)", s.TouchKey("unknown", T0), store.ErrNotFound)
	// A failed touch is not remembered: a later key with that hash is touched.
	MustCreateKey(t, s, "unknown", T0)
	Must(t, s.TouchKey("unknown", T0.Add(time.Second)))
	if k, _ := s.GetKey("unknown"); !k.LastUsedAt.Equal(T0.Add(time.Second)) {
		t.Errorf("touch after failed touch: %v", k.LastUsedAt)
	}
}

func keysTouchNeverBackwards(t *testing.T, e Env) {
	MustCreateKey(t, e.S, "k", T0)
	Must(t, e.S.TouchKey("k", T0.Add(time.Hour)))
	Must(t, e.S.TouchKey("k", T0.Add(time.Minute))) // older: passes the throttle, changes nothing
	if k, _ := e.S.GetKey("k"); !k.LastUsedAt.Equal(T0.Add(time.Hour)) {
		t.Errorf("LastUsedAt = %v, want it to stay at %v", k.LastUsedAt, T0.Add(time.Hour))
	}
}

func keysConcurrentMixedUse(t *testing.T, e Env) {
	s := e.S
	MustCreateKey(t, s, "k", T0)
	errs := concurrently(8, func(g int) error {
		for i := range 10 {
			at := T0.Add(time.Duration(g*10+i) * time.Minute)
			if err := s.TouchKey("k", at); err != nil {
				return err
			}
			if err := s.AppendLog(store.LogEntry{Timestamp: at, StreamName: store.StreamInfer, Subject: "k"}); err != nil {
				return err
			}
			if _, err := s.Stats(T0, T0.Add(24*time.Hour)); err != nil {
				return err
			}
			if _, err := s.Logs(store.LogQuery{Limit: 5}); err != nil {
				return err
			}
			if _, err := s.GetKey("k"); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		Must(t, err)
	}
	k, err := s.GetKey("k")
	Must(t, err)
	if want := T0.Add(79 * time.Minute); !k.LastUsedAt.Equal(want) {
		t.Errorf("LastUsedAt = %v, want the latest touch %v", k.LastUsedAt, want)
	}
	if st, _ := s.Stats(T0, T0.Add(24*time.Hour)); st.TotalRequests != 80 || st.ActiveUsers != 1 {
		t.Errorf("Stats = %+v, want 80 requests by 1 user", st)
	}
}

func keysConcurrentCreates(t *testing.T, e Env) {
	// 40 writers race for 20 hashes: each hash is created exactly once and
	// every loser gets ErrExists.
	errs := concurrently(40, func(i int) error {
		return e.S.CreateKey(store.APIKey{Hash: fmt.Sprintf("h%02d", i%20), ClientID: fmt.Sprint(i), CreatedAt: T0.Add(time.Duration(i%20) * time.Second)})
	})
	won, lost := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrExists):
			lost++
		default:
			t.Errorf("CreateKey: %v", err)
		}
	}
	if won != 20 || lost != 20 {
		t.Errorf("%d created, %d ErrExists; want 20 and 20", won, lost)
	}
	if ks := listKeys(t, e.S, 0, true); len(ks) != 20 || ks[0] != "h19" || ks[19] != "h00" {
		t.Errorf("ListKeys = %v", ks)
	}
}

// keysPages: 2,500 keys (more than the admin API's 1,000 a page), three
// created in each nanosecond and every seventh revoked, are reached page by
// page through ListKeysPage in exactly ListKeys's order, with or without
// the revoked ones; a key created between pages is on none of the later
// ones, and none repeats.
func keysPages(t *testing.T, e Env) {
	s := e.S
	const n = 2500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				k := store.APIKey{Hash: fmt.Sprintf("page%05d", i), ClientID: "c", Status: store.StatusActive,
					Scopes: []string{"infer"}, CreatedAt: T0.Add(time.Duration(i/3) * time.Second)}
				if i%7 == 0 {
					k.Status = store.StatusRevoked
					k.RevokedAt = T0
				}
				errs <- s.CreateKey(k)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		Must(t, err)
	}
	pages := func(limit int, rev bool, between func()) []string {
		var got []string
		var after *store.KeyCursor
		for page := 0; ; page++ {
			ks, next, err := s.ListKeysPage(after, limit, rev)
			Must(t, err)
			if len(ks) > limit || (next != nil && len(ks) != limit) {
				t.Fatalf("page %d: %d keys, next %v (limit %d)", page, len(ks), next, limit)
			}
			got = append(got, keyHashes(ks)...)
			if next == nil {
				return got
			}
			if c, err := store.ParseKeyCursor(next.String()); err != nil || c != *next {
				t.Fatalf("cursor %v does not round-trip: %v %v", next, c, err)
			}
			after = next
			if between != nil {
				between()
				between = nil
			}
		}
	}
	for _, rev := range []bool{true, false} {
		want := listKeys(t, s, 0, rev)
		if rev && len(want) != n {
			t.Fatalf("ListKeys holds %d keys, want %d", len(want), n)
		}
		for _, limit := range []int{1000, 333, 1} {
			if diff := cmp.Diff(want, pages(limit, rev, nil)); diff != "" {
				t.Errorf("pages of %d (revoked %v) differ from ListKeys (-want +got):\n%s", limit, rev, diff)
			}
		}
	}
	// A key created after the first page is newer than every position.
	want := listKeys(t, s, 0, false)
	got := pages(1000, false, func() { MustCreateKey(t, s, "newest", T0.Add(time.Hour)) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages with a key created between them (-want +got):\n%s", diff)
	}
	if _, _, err := s.ListKeysPage(nil, 0, false); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListKeysPage limit 0: %v, want ErrInvalid", err)
	}
	// A position past every key: an empty last page.
	ks, next, err := s.ListKeysPage(&store.KeyCursor{}, 10, true)
	if err != nil || len(ks) != 0 || next != nil {
		t.Errorf("ListKeysPage before the oldest = %v, %v, %v", keyHashes(ks), next, err)
	}
}
