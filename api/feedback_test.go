package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// jsonPost is a POST of the JSON body to path.
func jsonPost(path, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// feedbackReq builds POST /v1/feedback with key ("" sends none) and body.
func feedbackReq(key, body string) *http.Request {
	req := jsonPost("/v1/feedback", body)
	if key != "" {
		req.Header.Set(HeaderAPIKey, key)
	}
	return req
}

// subject is the server's pseudonym of userID.
func (e *env) subject(userID string) string {
	e.t.Helper()
	s, err := e.srv.pseudonym(userID)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// memSubject is how user_id is stored for requests of the API key key
// (userSubject): its memory and its statistics.
func (e *env) memSubject(key, userID string) string {
	e.t.Helper()
	s, _, err := e.srv.userSubject(secret.Hash(key), userID)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// infer makes one inference with key and returns its inference_id.
func (e *env) infer(key, payload string) string {
	e.t.Helper()
	rec := e.do(inferReq(e.t, key, payloadPart(payload)))
	if rec.Code != 200 {
		e.t.Fatalf("infer: %d %s", rec.Code, rec.Body)
	}
	var r struct {
		InferenceID string `json:"inference_id"`
	}
	decode(e.t, rec, &r)
	return r.InferenceID
}

func fbOK(id, outcome string, saved int, replaced, remembered bool) string {
	return fmt.Sprintf(`{"inference_id":%q,"outcome":%q,"keystrokes_saved":%d,"replaced":%t,"remembered":%t}`, id, outcome, saved, replaced, remembered)
}

// TestFeedbackScenarios covers every status of POST /v1/feedback. Each case
// starts from one inference (id) by the key "valid" whose candidates are
// "reply 1", "reply 2" and "reply 3".
func TestFeedbackScenarios(t *testing.T) {
	notFound := errJSON("not_found", "no inference with this inference_id is open for feedback from this API key (unknown, older than 24 h, or made with another key)")
	type step struct {
		key     string
		body    string // %s is the inference id
		advance time.Duration
		status  int
		want    string // %s is the inference id
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"spoken as it was", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":1,"time_to_choice_ms":2500}`, status: 200, want: fbOK("%s", "spoken", 6, false, false)}}},
		{"edited", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":2,"spoken_text":"reply 2, please"}`, status: 200, want: fbOK("%s", "edited", 15-8-1, false, false)}}},
		{"edit that changed nothing is spoken", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":3,"spoken_text":" reply 3 "}`, status: 200, want: fbOK("%s", "spoken", 6, false, false)}}},
		{"typed", []step{{key: "valid", body: `{"inference_id":"%s","spoken_text":"No thanks"}`, status: 200, want: fbOK("%s", "typed", 0, false, false)}}},
		{"none fit", []step{{key: "valid", body: `{"inference_id":"%s","none_fit":true}`, status: 200, want: fbOK("%s", "none_fit", 0, false, false)}}},
		{"none fit with what was typed", []step{{key: "valid", body: `{"inference_id":"%s","none_fit":true,"spoken_text":"Later"}`, status: 200, want: fbOK("%s", "none_fit", 0, false, false)}}},
		{"replaced within 10 minutes", []step{
			{key: "valid", body: `{"inference_id":"%s","chosen_rank":1}`, status: 200, want: fbOK("%s", "spoken", 6, false, false)},
			{key: "valid", body: `{"inference_id":"%s","none_fit":true}`, advance: 9 * time.Minute, status: 200, want: fbOK("%s", "none_fit", 0, true, false)},
			// The 10 minutes run from the first report, not the last.
			{key: "valid", body: `{"inference_id":"%s","chosen_rank":2}`, advance: 2 * time.Minute, status: 409, want: errJSON("conflict", "an outcome was reported for this inference more than 10 minutes ago; it can no longer be changed")},
		}},
		{"later than 10 minutes", []step{
			{key: "valid", body: `{"inference_id":"%s","chosen_rank":1}`, status: 200, want: fbOK("%s", "spoken", 6, false, false)},
			{key: "valid", body: `{"inference_id":"%s","chosen_rank":2}`, advance: 11 * time.Minute, status: 409, want: errJSON("conflict", "an outcome was reported for this inference more than 10 minutes ago; it can no longer be changed")},
		}},
		{"within 24 hours", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":1}`, advance: 24 * time.Hour, status: 200, want: fbOK("%s", "spoken", 6, false, false)}}},
		{"after 24 hours", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":1}`, advance: 24*time.Hour + time.Second, status: 404, want: notFound}}},
		{"unknown id", []step{{key: "valid", body: `{"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAA","chosen_rank":1}`, status: 404, want: notFound}}},
		{"another key's inference", []step{{key: "other", body: `{"inference_id":"%s","chosen_rank":1}`, status: 404, want: notFound}}},

		{"no key", []step{{key: "", body: `{"inference_id":"%s","chosen_rank":1}`, status: 401, want: errJSON("unauthorized", "the X-API-KEY header is required")}}},
		{"wrong key", []step{{key: "nope", body: `{"inference_id":"%s","chosen_rank":1}`, status: 401, want: errJSON("unauthorized", "X-API-KEY is not a valid API key")}}},
		{"revoked key", []step{{key: "revoked", body: `{"inference_id":"%s","chosen_rank":1}`, status: 401, want: errJSON("unauthorized", "X-API-KEY has been revoked")}}},
		{"key without scope infer", []step{{key: "noscope", body: `{"inference_id":"%s","chosen_rank":1}`, status: 403, want: errJSON("forbidden", `this API key lacks the scope "infer"`)}}},

		{"empty body", []step{{key: "valid", body: ``, status: 400, want: errJSON("invalid_request", "a JSON request body is required")}}},
		{"not JSON", []step{{key: "valid", body: `{"inference_id":`, status: 400, want: errJSON("invalid_request", "the request body is not valid JSON (unexpected end)")}}},
		{"wrong type", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":"1"}`, status: 400, want: errJSON("invalid_request", "chosen_rank has the wrong type: expected an integer")}}},
		{"no inference_id", []step{{key: "valid", body: `{"chosen_rank":1}`, status: 400, want: errJSON("invalid_request", "inference_id is required: the inference_id of a /v1/infer answer")}}},
		{"malformed inference_id", []step{{key: "valid", body: `{"inference_id":"42","chosen_rank":1}`, status: 400, want: errJSON("invalid_request", "inference_id is malformed: it is the inference_id of a /v1/infer answer, such as inf_8kq0V2xqT0mJ4c9wZr1bYg")}}},
		{"no outcome", []step{{key: "valid", body: `{"inference_id":"%s"}`, status: 400, want: errJSON("invalid_request", "one of chosen_rank, spoken_text or none_fit: true is required")}}},
		{"none_fit false alone", []step{{key: "valid", body: `{"inference_id":"%s","none_fit":false}`, status: 400, want: errJSON("invalid_request", "one of chosen_rank, spoken_text or none_fit: true is required")}}},
		{"rank 0", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":0}`, status: 400, want: errJSON("invalid_request", "chosen_rank must be 1 or more: the rank of the spoken candidate")}}},
		{"rank beyond the candidates", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":4}`, status: 400, want: errJSON("invalid_request", "chosen_rank is 4 but the inference returned 3 candidates")}}},
		{"rank and none_fit", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":1,"none_fit":true}`, status: 400, want: errJSON("invalid_request", "chosen_rank and none_fit: true contradict each other: send one of them")}}},
		{"empty spoken_text", []step{{key: "valid", body: `{"inference_id":"%s","spoken_text":"  "}`, status: 400, want: errJSON("invalid_request", "spoken_text must not be empty; omit it when the user spoke a suggestion as it was")}}},
		{"long spoken_text", []step{{key: "valid", body: `{"inference_id":"%s","spoken_text":"` + strings.Repeat("x", 4001) + `"}`, status: 400, want: errJSON("invalid_request", "spoken_text has 4001 characters; the limit is 4000")}}},
		{"negative time", []step{{key: "valid", body: `{"inference_id":"%s","chosen_rank":1,"time_to_choice_ms":-1}`, status: 400, want: errJSON("invalid_request", "time_to_choice_ms must be between 0 and 86400000")}}},
		{"body too large", []step{{key: "valid", body: `{"spoken_text":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413, want: errJSON("payload_too_large", "the request body exceeds the limit of 1 MiB")}}},
		{"feedback budget spent", []step{
			{key: "slow", body: `{"inference_id":"%s","chosen_rank":1}`, status: 404, want: notFound},
			{key: "slow", body: `{"inference_id":"%s","chosen_rank":1}`, status: 429, want: errJSON("rate_limited", "feedback rate limit of 1 reports per minute exceeded for this API key; retry in 60 s")},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addKey("valid", 60)
			e.addKey("other", 60)
			e.addKey("slow", 1)
			e.addKey("noscope", 60, "none")
			e.addKey("revoked", 60)
			if _, err := e.st.RevokeKey(secret.Hash("revoked"), t0); err != nil {
				t.Fatal(err)
			}
			id := e.infer("valid", simplePayload)
			for i, s := range tc.steps {
				e.clock.Advance(s.advance)
				body := s.body
				if strings.Contains(body, "%s") {
					body = fmt.Sprintf(body, id)
				}
				want := s.want
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, id)
				}
				rec := e.do(feedbackReq(s.key, body))
				if rec.Code != s.status {
					t.Errorf("step %d: status %d, want %d: %s", i, rec.Code, s.status, rec.Body)
				}
				wantJSON(t, rec, s.status, want)
			}
		})
	}
}

// TestFeedbackStoreFailure: a store error is a 500 with the fixed message.
func TestFeedbackStoreFailure(t *testing.T) {
	e := newEnvWithKeys(t, 60, "valid")
	id := e.infer("valid", simplePayload)
	e.st.fail(errors.New("disk on fire"))
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":1}`)), 500, errJSON("internal", "Internal error."))
}

// TestFeedbackBudgetIsSeparate: feedback never costs an inference and
// inferences never cost feedback.
func TestFeedbackBudgetIsSeparate(t *testing.T) {
	e := newEnvWithKeys(t, 2, "valid")
	a := e.infer("valid", simplePayload)
	b := e.infer("valid", simplePayload)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 429, errJSON("rate_limited", "rate limit of 2 requests per minute exceeded for this API key; retry in 60 s"))
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+a+`","chosen_rank":1}`)), 200, fbOK(a, "spoken", 6, false, false))
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+b+`","chosen_rank":2}`)), 200, fbOK(b, "spoken", 6, false, false))
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+b+`","chosen_rank":3}`)), 429, errJSON("rate_limited", "feedback rate limit of 2 reports per minute exceeded for this API key; retry in 60 s"))
}

// blockingStore holds infer log entries back until release is closed, as a
// slow disk would, so that a tablet can report before the entry is written.
type blockingStore struct {
	Store
	release chan struct{}
	held    chan struct{}
	once    sync.Once
}

func (b *blockingStore) AppendLog(e store.LogEntry) error {
	if e.Inference != nil {
		b.once.Do(func() { close(b.held) })
		<-b.release
	}
	return b.Store.AppendLog(e)
}

// TestFeedbackBeforeTheLogEntryIsWritten: the answer reaches the tablet
// before its log entry is on disk; a report sent at once waits for the
// entry instead of answering 404.
func TestFeedbackBeforeTheLogEntryIsWritten(t *testing.T) {
	var bs *blockingStore
	e := newEnv(t, func(o *Options) {
		bs = &blockingStore{Store: o.Store, release: make(chan struct{}), held: make(chan struct{})}
		o.Store = bs
	})
	e.addKey("valid", 60)
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	body, ct := multipartBody(t, payloadPart(simplePayload))
	req, _ := http.NewRequest("POST", srv.URL+"/v1/infer", body)
	req.Header.Set("Content-Type", ct)
	req.Header.Set(HeaderAPIKey, "valid")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		InferenceID string `json:"inference_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.InferenceID == "" {
		t.Fatalf("answer: %v %+v", err, r)
	}
	<-bs.held // the answer is out, its log entry is not written

	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/feedback", strings.NewReader(`{"inference_id":"`+r.InferenceID+`","chosen_rank":1}`))
		req.Header.Set(HeaderAPIKey, "valid")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- fmt.Sprint(resp.StatusCode, " ", strings.TrimSpace(string(b)))
	}()
	select {
	case g := <-got:
		t.Fatalf("feedback answered before the entry was written: %s", g)
	case <-time.After(50 * time.Millisecond):
	}
	close(bs.release)
	resp.Body.Close()
	if g, want := <-got, "200 "+fbOK(r.InferenceID, "spoken", 6, false, false); g != want {
		t.Errorf("feedback: %s, want %s", g, want)
	}
}

// TestRememberAndUserAdmin: remember: true keeps the partner turn and what
// the user said as a pair, the admin lists, exports and deletes the user,
// and text shows up only in the admin-only exports.
func TestRememberAndUserAdmin(t *testing.T) {
	e := newEnvWithKeys(t, 60, "valid")
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(`{"remember":true,"messages":[{"role":"speaker","content":"Tea?"}]}`))), 400,
		errJSON("invalid_request", "remember requires user_id: replies are remembered per user"))
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(`{"remember":"yes","user_id":"sam","messages":[{"role":"speaker","content":"Tea?"}]}`))), 400,
		errJSON("invalid_request", "remember has the wrong type: expected a boolean"))

	const partner = "Fancy a cuppa, SECRET-PARTNER?"
	a := e.infer("valid", `{"remember":true,"user_id":"sam/ward 3","messages":[{"role":"speaker","content":"`+partner+`"}]}`)
	if got := e.inf.last().MemoryUser; got != e.memSubject("valid", "sam/ward 3") {
		t.Errorf("MemoryUser = %q, want the user's subject", got)
	}
	b := e.infer("valid", `{"user_id":"kim","messages":[{"role":"speaker","content":"Walk?"}]}`)
	if got := e.inf.last().MemoryUser; got != "" {
		t.Errorf("MemoryUser without remember = %q", got)
	}
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+a+`","chosen_rank":2,"spoken_text":"reply 2 SECRET-REPLY"}`)), 200,
		fbOK(a, "edited", 20-13-1, false, true))
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+b+`","spoken_text":"KIM-TEXT not kept"}`)), 200, fbOK(b, "typed", 0, false, false))

	p := userLabel(e.memSubject("valid", "sam/ward 3"))
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/users", "")), 200,
		`{"items":[{"user":"`+p+`","pairs":1,"created_at":"2026-01-02T03:04:05Z","last_at":"2026-01-02T03:04:05Z","keys":["`+secret.Hash("valid")+`"]}],"count":1}`)

	for _, target := range []string{"/v1/admin/users/" + p + "/pairs?format=jsonl", "/v1/admin/users/sam%2Fward%203/pairs"} {
		rec := e.do(adminReq("GET", target, ""))
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("%s: %d %q %s", target, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		want := `{"messages":[{"role":"speaker","content":"` + partner + `"}],"reply":"reply 2 SECRET-REPLY","inference_id":"` + a + `","at":"2026-01-02T03:04:05Z","user":"` + p + `"}` + "\n"
		if rec.Body.String() != want {
			t.Errorf("%s:\n got %s\nwant %s", target, rec.Body, want)
		}
	}
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/users/kim/pairs", "")), 404, errJSON("not_found", "no remembered replies are kept for this user"))
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/users/"+p+"/pairs?format=csv", "")), 400, errJSON("invalid_request", "format must be jsonl"))

	rec := e.do(adminReq("GET", "/v1/admin/outcomes?format=jsonl", ""))
	lines := strings.Split(strings.TrimSpace(rec.Body.String()), "\n")
	if rec.Code != 200 || len(lines) != 2 {
		t.Fatalf("outcomes: %d %s", rec.Code, rec.Body)
	}
	hv := secret.Hash("valid")
	wantA := `{"messages":[{"role":"speaker","content":"` + partner + `"}],"reply":"reply 2 SECRET-REPLY","inference_id":"` + a + `","at":"2026-01-02T03:04:05Z","user":"` + p + `","api_key_hash":"` + hv + `","prompt_version":"1","outcome":"edited","chosen_rank":2,"spoken_chars":20,"keystrokes_saved":6}`
	wantB := `{"inference_id":"` + b + `","at":"2026-01-02T03:04:05Z","user":"` + userLabel(e.memSubject("valid", "kim")) + `","api_key_hash":"` + hv + `","prompt_version":"1","outcome":"typed","spoken_chars":17,"keystrokes_saved":0}`
	if lines[0] != wantA || lines[1] != wantB {
		t.Errorf("outcomes:\n got %s\n     %s\nwant %s\n     %s", lines[0], lines[1], wantA, wantB)
	}

	wantDeletion(t, e.do(adminReq("DELETE", "/v1/admin/users/"+p, "")),
		`{"user":"`+p+`","pairs":1,"pending":1,"outcomes":1,"key_destroyed":true,"scrubbed_pages":0,"scrub_ms":0}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/users/"+p+"/pairs", "")), 404, errJSON("not_found", "no remembered replies are kept for this user"))
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/users/"+p, "")), 404, errJSON("not_found", "nothing is stored for this user"))
	// A user without memory, named by user_id: its outcomes go.
	wantDeletion(t, e.do(adminReq("DELETE", "/v1/admin/users/kim", "")),
		`{"user":"`+userLabel(e.subject("kim"))+`","pairs":0,"pending":0,"outcomes":1,"key_destroyed":false,"scrubbed_pages":0,"scrub_ms":0}`)

	rec = e.do(adminReq("GET", "/v1/admin/logs?stream=admin", ""))
	for _, want := range []string{"exported 1 remembered pairs of user " + p, "exported 2 outcomes (1 with the user's texts)", "deleted user " + p + ": 1 pairs"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("admin log lacks %q: %s", want, rec.Body)
		}
	}
	all := e.do(adminReq("GET", "/v1/admin/logs", "")).Body.String()
	for _, secret := range []string{"SECRET", "KIM-TEXT", "cuppa"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q in the logs API", secret)
		}
	}
}

// wantDeletion checks a 200 answer to DELETE /v1/admin/users/{user} against
// want, whose scrubbed_pages and scrub_ms are 0: how many free pages the
// scrub overwrote, and how long it took, depend on the file and the disk.
func wantDeletion(t *testing.T, rec *httptest.ResponseRecorder, want string) {
	t.Helper()
	var d userDeletionJSON
	decode(t, rec, &d)
	d.ScrubbedPages, d.ScrubMS = 0, 0
	got, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Code != 200 || compact(t, string(got)) != compact(t, want) {
		t.Errorf("DELETE: %d\n got %s\nwant %s", rec.Code, got, want)
	}
}

// TestDeleteUserReportsAnIncompleteScrub: when the store could not clear
// the space a deleted user's rows took (PostgreSQL refused a VACUUM or
// CHECKPOINT), the deletion answers 200 (it is committed) and the admin log
// says what is incomplete, at warn level.
func TestDeleteUserReportsAnIncompleteScrub(t *testing.T) {
	e := newEnvWithKeys(t, 60, "valid")
	id := e.infer("valid", `{"remember":true,"user_id":"kim","messages":[{"role":"speaker","content":"Tea?"}]}`)
	wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":1}`)), 200, fbOK(id, "spoken", 6, false, true))
	e.st.scrubProblem = "CHECKPOINT is not permitted to this database user (grant it pg_checkpoint)"
	if rec := e.do(adminReq("DELETE", "/v1/admin/users/kim", "")); rec.Code != 200 {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	rec := e.do(adminReq("GET", "/v1/admin/logs?stream=admin&level=warn", ""))
	if want := "clearing the space its rows took is incomplete: " + e.st.scrubProblem; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("admin log at warn lacks %q: %s", want, rec.Body)
	}
}

// TestStatsWithOutcomes: the outcome fields, per key and per prompt version
// after a prompt change, and the series.
func TestStatsWithOutcomes(t *testing.T) {
	e := newEnvWithKeys(t, 60, "valid", "other")
	report := func(key, id, body string) {
		t.Helper()
		if rec := e.do(feedbackReq(key, `{"inference_id":"`+id+`",`+body+`}`)); rec.Code != 200 {
			t.Fatalf("feedback: %d %s", rec.Code, rec.Body)
		}
	}
	report("valid", e.infer("valid", simplePayload), `"chosen_rank":1,"time_to_choice_ms":1000`)
	report("valid", e.infer("valid", simplePayload), `"none_fit":true,"time_to_choice_ms":9000`)
	e.infer("valid", simplePayload) // no feedback
	e.clock.Advance(time.Hour)
	if rec := e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be brief.","version":"2"}`)); rec.Code != 200 {
		t.Fatal(rec.Body)
	}
	report("other", e.infer("other", simplePayload), `"chosen_rank":2,"spoken_text":"reply 2 ok","time_to_choice_ms":3000`)
	e.clock.Advance(time.Minute)

	rec := e.do(adminReq("GET", "/v1/admin/stats?window=2h&bucket=1h", ""))
	var st struct {
		Outcomes        int            `json:"outcomes"`
		Accepted        int            `json:"accepted"`
		AcceptanceRate  *float64       `json:"acceptance_rate"`
		RankCounts      map[string]int `json:"rank_counts"`
		NoneFit         int            `json:"none_fit"`
		TimeToChoice    map[string]int `json:"time_to_choice_ms"`
		KeystrokesSaved int            `json:"keystrokes_saved"`
		ByKey           []struct {
			ClientID       string   `json:"client_id"`
			Outcomes       int      `json:"outcomes"`
			AcceptanceRate *float64 `json:"acceptance_rate"`
		} `json:"by_key"`
		ByPromptVersion []versionStatsJSON `json:"by_prompt_version"`
		Series          []statsBucket      `json:"series"`
	}
	decode(t, rec, &st)
	one, two3 := 1.0, 0.6667
	if st.Outcomes != 3 || st.Accepted != 2 || *st.AcceptanceRate != two3 || st.RankCounts["1"] != 1 || st.RankCounts["2"] != 1 ||
		st.NoneFit != 1 || st.TimeToChoice["p50"] != 3000 || st.TimeToChoice["p95"] != 9000 || st.KeystrokesSaved != 6+(10-3-1) {
		t.Errorf("overall: %s", rec.Body)
	}
	if len(st.ByKey) != 2 || st.ByKey[0].ClientID != "tablet-valid" || st.ByKey[0].Outcomes != 2 || *st.ByKey[0].AcceptanceRate != 0.5 ||
		st.ByKey[1].ClientID != "tablet-other" || *st.ByKey[1].AcceptanceRate != one {
		t.Errorf("by_key: %+v", st.ByKey)
	}
	if len(st.ByPromptVersion) != 2 || st.ByPromptVersion[0].Version != "1" || st.ByPromptVersion[0].Inferences != 3 || *st.ByPromptVersion[0].AcceptanceRate != 0.5 ||
		st.ByPromptVersion[1].Version != "2" || st.ByPromptVersion[1].Inferences != 1 || *st.ByPromptVersion[1].AcceptanceRate != one {
		t.Errorf("by_prompt_version: %+v", st.ByPromptVersion)
	}
	if len(st.Series) != 2 || st.Series[0].Outcomes != 2 || st.Series[0].Accepted != 1 || st.Series[1].Outcomes != 1 || st.Series[1].Accepted != 1 {
		t.Errorf("series: %+v", st.Series)
	}

	metrics := e.do(adminReq("GET", "/metrics", "")).Body.String()
	for _, want := range []string{
		`replyd_outcomes_total{outcome="spoken",prompt_version="1"} 1`,
		`replyd_outcomes_total{outcome="none_fit",prompt_version="1"} 1`,
		`replyd_outcomes_total{outcome="edited",prompt_version="2"} 1`,
		`replyd_keystrokes_saved_total 12`,
		`replyd_time_to_choice_seconds_count 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestStatsSeriesHasNoBucketAtNow: the series ends where the window does;
// no trailing bucket starts at "now" (it would always read zero).
func TestStatsSeriesHasNoBucketAtNow(t *testing.T) {
	clock := &fakeClock{t: t0, tick: time.Nanosecond}
	e := newEnv(t, func(o *Options) { o.Now = clock.Now })
	for _, q := range []string{"window=24h&bucket=1h", "window=15m&bucket=1m", "window=7d&bucket=6h"} {
		var st struct {
			Since  time.Time     `json:"since"`
			Series []statsBucket `json:"series"`
		}
		decode(t, e.do(adminReq("GET", "/v1/admin/stats?"+q, "")), &st)
		w, _ := parseDuration(strings.TrimPrefix(strings.Split(q, "&")[0], "window="))
		b, _ := parseDuration(strings.Split(q, "bucket=")[1])
		if len(st.Series) != int(w/b) {
			t.Errorf("%s: %d buckets, want %d", q, len(st.Series), w/b)
		}
		if last := st.Series[len(st.Series)-1].Start; !last.Equal(st.Since.Add(w - b)) {
			t.Errorf("%s: last bucket starts at %v, want %v", q, last, st.Since.Add(w-b))
		}
	}
}
