package api

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestListKeysPages: the key list reaches every key through next_cursor,
// page after page, in the order of one long list, with and without the
// revoked keys; the last page has no next_cursor.
func TestListKeysPages(t *testing.T) {
	e := newEnv(t)
	for i := range 25 {
		e.clock.Advance(time.Second)
		e.addKey(fmt.Sprintf("page-key-%02d", i), 0)
		if i%4 == 0 {
			rec := e.do(adminReq("GET", "/v1/admin/keys?limit=1", ""))
			var one struct {
				Items []struct{ APIKeyHash string } `json:"items"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &one)
			e.do(adminReq("DELETE", "/v1/admin/keys/"+one.Items[0].APIKeyHash, ""))
		}
	}
	type page struct {
		Items []struct {
			APIKeyHash string
		} `json:"items"`
		Count      int    `json:"count"`
		NextCursor string `json:"next_cursor"`
	}
	get := func(q string) page {
		t.Helper()
		rec := e.do(adminReq("GET", "/v1/admin/keys?"+q, ""))
		if rec.Code != 200 {
			t.Fatalf("GET ?%s: %d %s", q, rec.Code, rec.Body)
		}
		var p page
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Count != len(p.Items) {
			t.Fatalf("GET ?%s: %s (%v)", q, rec.Body, err)
		}
		return p
	}
	for _, rev := range []string{"false", "true"} {
		all := get("limit=1000&include_revoked=" + rev)
		if all.NextCursor != "" {
			t.Errorf("the whole list has a next_cursor %q", all.NextCursor)
		}
		var got []string
		q := "limit=10&include_revoked=" + rev
		for n := 0; ; n++ {
			p := get(q)
			for _, it := range p.Items {
				got = append(got, it.APIKeyHash)
			}
			if p.NextCursor == "" {
				break
			}
			if n > 10 {
				t.Fatal("the pages do not end")
			}
			q = "limit=10&include_revoked=" + rev + "&cursor=" + p.NextCursor
		}
		if len(got) != len(all.Items) {
			t.Fatalf("pages hold %d keys, the list %d", len(got), len(all.Items))
		}
		for i := range got {
			if got[i] != all.Items[i].APIKeyHash {
				t.Fatalf("key %d of the pages is %s, of the list %s", i, got[i], all.Items[i].APIKeyHash)
			}
		}
	}
}

// TestListUsersLimit: GET /v1/admin/users checks limit as the other lists
// do (it answered 200 to limit=-1).
func TestListUsersLimit(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=-1"} {
		wantJSON(t, e.do(adminReq("GET", "/v1/admin/users?"+q, "")), 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000"))
	}
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/users?limit=5", "")), 200, `{"items":[],"count":0}`)
}
