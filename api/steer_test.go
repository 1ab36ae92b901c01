package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
)

// steerPayload is the test dialog with extra members.
func steerPayload(extra string) string {
	return `{"messages":[{"role":"speaker","content":"Tea?"}]` + extra + `}`
}

// TestSteerPayload: steer and parent_inference_id are validated, and a
// valid one reaches the engine as a plain engine.Steer.
func TestSteerPayload(t *testing.T) {
	e := newEnv(t)
	key := e.addKey("valid", 1000)
	parent := e.infer(key, steerPayload(""))
	p := fmt.Sprintf(`,"parent_inference_id":%q`, parent)
	for _, c := range []struct {
		name, extra string
		want        *engine.Steer
		status      int
		code, msg   string
	}{
		{"words", `,"steer":{"words":["i","w","bedr","tea ",""]}` + p, &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "bedr", "tea ", ""}}, 200, "", ""},
		{"prefix", `,"steer":{"prefix":"I would li"}` + p, &engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, 200, "", ""},
		{"replace", `,"steer":{"replace":{"text":"I want tea","word":2,"initial":"c"}}` + p, &engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2, Initial: "c"}, 200, "", ""},
		{"replace without initial", `,"steer":{"replace":{"text":"I want tea","word":0}}` + p, &engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 0}, 200, "", ""},
		{"steer null", `,"steer":null`, nil, 200, "", ""},
		{"none", `,"steer":{}` + p, nil, 400, "invalid_request", "steer must have exactly one of words, prefix or replace (it has 0)"},
		{"two", `,"steer":{"words":["a"],"prefix":"a"}` + p, nil, 400, "invalid_request", "steer must have exactly one of words, prefix or replace (it has 2)"},
		{"words null", `,"steer":{"words":null}` + p, nil, 400, "invalid_request", "steer.words must be an array of strings"},
		{"not an object", `,"steer":"iwlt"` + p, nil, 400, "invalid_request", "steer must be an object with exactly one of words, prefix or replace"},
		{"too many words", `,"steer":{"words":["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]}` + p, nil, 400, "invalid_request", "steer.words must have 1 to 16 entries (one per word of the reply)"},
		{"two words in one", `,"steer":{"words":["a b"]}` + p, nil, 400, "invalid_request", "steer.words[0] must be the beginning of one word: letters and digits, joined by inner apostrophes or hyphens, optionally ending in one space for the whole word"},
		{"entry too long", `,"steer":{"words":["` + strings.Repeat("x", 33) + `"]}` + p, nil, 400, "invalid_request", "steer.words[0] has 33 characters; the limit is 32"},
		{"empty prefix", `,"steer":{"prefix":""}` + p, nil, 400, "invalid_request", "steer.prefix must have 1 to 200 characters"},
		{"word out of range", `,"steer":{"replace":{"text":"I want tea","word":3}}` + p, nil, 400, "invalid_request", "steer.replace.word is 3 but steer.replace.text has 3 words (word is 0-based)"},
		{"word missing", `,"steer":{"replace":{"text":"I want tea"}}` + p, nil, 400, "invalid_request", "steer.replace.word is required (the 0-based index of the word to replace)"},
		{"initial of two letters", `,"steer":{"replace":{"text":"I want tea","word":1,"initial":"ab"}}` + p, nil, 400, "invalid_request", "steer.replace.initial must be a single letter or digit"},
		{"no parent", `,"steer":{"words":["a"]}`, nil, 400, "invalid_request", "parent_inference_id is required with steer: the inference_id of the turn it refines"},
		{"malformed parent", `,"steer":{"words":["a"]},"parent_inference_id":"x"`, nil, 400, "invalid_request", "parent_inference_id is malformed: it is the inference_id of a /v1/infer answer"},
		{"parent without steer", p, nil, 400, "invalid_request", "parent_inference_id is only for a steered request: send it with steer"},
		{"unknown parent", `,"steer":{"words":["a"]},"parent_inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAA"`, nil, 404, "not_found", "no inference with this inference_id is open for feedback from this API key (unknown, older than 24 h, or made with another key)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := e.do(inferReq(t, key, payloadPart(steerPayload(c.extra))))
			if c.status != 200 {
				wantJSON(t, rec, c.status, errJSON(c.code, c.msg))
				return
			}
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if d := cmp.Diff(c.want, e.inf.last().Steer); d != "" {
				t.Errorf("engine steer (-want +got):\n%s", d)
			}
			var out map[string]any
			decode(t, rec, &out)
			if c.want != nil && out["steer_mode"] != string(c.want.Mode) {
				t.Errorf("steer_mode %v, want %s", out["steer_mode"], c.want.Mode)
			}
			if c.want == nil && out["steer_mode"] != nil {
				t.Errorf("steer_mode %v on an unsteered answer", out["steer_mode"])
			}
		})
	}
}

// TestSteerAnswerAndBudget: a steered answer echoes its mode and
// exhaustion, has its own id, can be refined in turn, spends the steering
// budget (not the inference rate limit) and is refused another key's turn.
func TestSteerAnswerAndBudget(t *testing.T) {
	e := newEnv(t)
	key := e.addKey("valid", 2) // two inferences a minute
	other := e.addKey("other", 100)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		res, err := echoInferer(ctx, req)
		if req.Steer != nil {
			res.Candidates, res.SteerExhausted = res.Candidates[:1], true
		}
		return res, err
	}
	parent := e.infer(key, steerPayload(`,"options":{"max_candidates":3}`))
	steered := func(k, parent string) (int, map[string]any) {
		rec := e.do(inferReq(t, k, payloadPart(steerPayload(fmt.Sprintf(`,"options":{"max_candidates":3},"steer":{"words":["r"]},"parent_inference_id":%q`, parent)))))
		var out map[string]any
		decode(t, rec, &out)
		return rec.Code, out
	}
	code, out := steered(key, parent)
	if code != 200 || out["steer_mode"] != "words" || out["steer_exhausted"] != true || out["inference_id"] == parent || len(out["response"].([]any)) != 1 {
		t.Fatalf("steered: %d %v", code, out)
	}
	// Its own id may be refined in turn; the budget has a burst of 10.
	last := out["inference_id"].(string)
	for i := 1; i < steerBurst; i++ {
		code, out := steered(key, last)
		if code != 200 {
			t.Fatalf("steered request %d: %d %v", i+1, code, out)
		}
		last = out["inference_id"].(string)
	}
	if code, out := steered(key, last); code != 429 || !strings.HasPrefix(out["message"].(string), "steering budget of 100 requests a minute (bursts of 10) exceeded") {
		t.Fatalf("over the burst: %d %v", code, out)
	}
	// 600 ms later one more keystroke is allowed.
	e.clock.Advance(600 * time.Millisecond)
	if code, out := steered(key, last); code != 200 {
		t.Fatalf("after 600 ms: %d %v", code, out)
	}
	// The key's inference limit (2 a minute) still has one left: the
	// steered requests did not spend it.
	e.infer(key, steerPayload(""))
	// Another key may not refine this key's turn.
	if code, out := steered(other, parent); code != 404 {
		t.Fatalf("another key's parent: %d %v", code, out)
	}
}

// TestSteerFeedbackKSR: feedback naming a steered answer is the turn's
// outcome, with the steering mode's keystroke saving rate in /metrics.
func TestSteerFeedbackKSR(t *testing.T) {
	e := newEnv(t)
	key := e.addKey("valid", 100)
	parent := e.infer(key, steerPayload(`,"options":{"max_candidates":3}`))
	rec := e.do(inferReq(t, key, payloadPart(steerPayload(fmt.Sprintf(`,"options":{"max_candidates":3},"steer":{"prefix":"rep"},"parent_inference_id":%q`, parent)))))
	var out struct {
		InferenceID string `json:"inference_id"`
	}
	decode(t, rec, &out)
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"inference_id":"%s","chosen_rank":1,"keys_pressed":-1}`, 400, errJSON("invalid_request", "keys_pressed must be between 0 and 10000")},
		{`{"inference_id":"%s","chosen_rank":1,"selections":10001}`, 400, errJSON("invalid_request", "selections must be between 0 and 10000")},
		{`{"inference_id":"%s","chosen_rank":4}`, 400, errJSON("invalid_request", "chosen_rank is 4 but the inference returned 3 candidates")},
		// "reply 1": 7 characters from 3 keys and 1 selection.
		{`{"inference_id":"%s","chosen_rank":1,"keys_pressed":3,"selections":1}`, 200, fbOK(parent, "spoken", 6, false, false)},
	} {
		rec := e.do(feedbackReq(key, fmt.Sprintf(c.body, out.InferenceID)))
		wantJSON(t, rec, c.status, c.want)
	}
	// Another key cannot report on it.
	e.addKey("other", 100)
	rec = e.do(feedbackReq("other", fmt.Sprintf(`{"inference_id":%q,"chosen_rank":1}`, out.InferenceID)))
	if rec.Code != 404 {
		t.Fatalf("another key: %d %s", rec.Code, rec.Body)
	}
	// An unsteered pick with no keys is mode none.
	parent2 := e.infer(key, steerPayload(""))
	wantJSON(t, e.do(feedbackReq(key, fmt.Sprintf(`{"inference_id":%q,"chosen_rank":2,"keys_pressed":0,"selections":1}`, parent2))), 200, fbOK(parent2, "spoken", 6, false, false))
	var st struct {
		KSR []ksrJSON `json:"ksr"`
	}
	e.clock.Advance(time.Second) // the window ends before now
	decode(t, e.do(adminReq("GET", "/v1/admin/stats?window=1h", "")), &st)
	r1, r2 := 3.0/7, 6.0/7
	want := []ksrJSON{
		{SteerMode: "none", PromptVersion: "1", Replies: 1, Chars: 7, Actions: 1, KSR: &r2},
		{SteerMode: "prefix", PromptVersion: "1", Replies: 1, Chars: 7, Actions: 4, KSR: &r1},
	}
	if d := cmp.Diff(want, st.KSR); d != "" {
		t.Errorf("stats ksr (-want +got):\n%s", d)
	}
	m := e.do(adminReq("GET", "/metrics", "")).Body.String()
	for _, want := range []string{
		`replyd_ksr_chars_total{prompt_version="1",steer_mode="prefix"} 7`,
		`replyd_ksr_actions_total{prompt_version="1",steer_mode="prefix"} 4`,
		`replyd_ksr_replies_total{prompt_version="1",steer_mode="none"} 1`,
		`replyd_ksr_actions_total{prompt_version="1",steer_mode="none"} 1`,
		`replyd_steer_answers_total{exhausted="false",steer_mode="prefix"} 1`,
		`replyd_steer_requests_total{outcome="ok"} 1`,
		`replyd_inferences_total{outcome="ok"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
