package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/internal/replydproc"
)

// steerAnswer is the part of a steered answer the test reads.
type steerAnswer struct {
	Response       []string `json:"response"`
	InferenceID    string   `json:"inference_id"`
	SteerMode      string   `json:"steer_mode"`
	SteerExhausted bool     `json:"steer_exhausted"`
}

// TestSteerEndToEnd steers through the real program on the demo models:
// initials, a spelled word, a prefix ending mid-word and a replaced word,
// each refining the turn's answer (or a steered answer of it); every
// candidate meets its constraint, the statistics count the turn once, and
// malformed or foreign steering is refused.
func TestSteerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-steer-0123456789"
	_, env := demoEnv(t, adminKey)
	p := startReplyd(t, env)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}
	created := p.JSON("POST", "/v1/admin/keys", admin, map[string]any{"client_id": "tablet-steer"}, 200)
	apiKey, _ := created["api_key"].(string)
	other, _ := p.JSON("POST", "/v1/admin/keys", admin, map[string]any{"client_id": "tablet-other"}, 200)["api_key"].(string)

	const dialog = `"messages":[{"role":"speaker","content":"Would you like some tea?"}],"dialog_id":"d-steer","options":{"max_candidates":3}`
	infer := func(key, extra string) replydproc.Response {
		return p.Call(inferRequest(key, "{"+dialog+extra+"}", nil))
	}
	r := infer(apiKey, "")
	var turn steerAnswer
	if r.Status != 200 || json.Unmarshal(r.Body, &turn) != nil || turn.InferenceID == "" || turn.SteerMode != "" {
		t.Fatalf("the turn: %d %s", r.Status, r.Body)
	}

	parent := turn.InferenceID
	for _, c := range []struct {
		steer string
		s     engine.Steer
	}{
		{`{"words":["i","w","l","t"]}`, engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}},
		{`{"words":["Q","x","z"]}`, engine.Steer{Mode: engine.SteerWords, Words: []string{"Q", "x", "z"}}},
		{`{"words":["i","w","t","g","t","t","bedr"]}`, engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t", "g", "t", "t", "bedr"}}},
		{`{"words":["tea ",""]}`, engine.Steer{Mode: engine.SteerWords, Words: []string{"tea ", ""}}},
		{`{"prefix":"I would li"}`, engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}},
		{`{"replace":{"text":"I want tea","word":2,"initial":"c"}}`, engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2, Initial: "c"}},
	} {
		r := infer(apiKey, fmt.Sprintf(`,"steer":%s,"parent_inference_id":%q`, c.steer, parent))
		var a steerAnswer
		if r.Status != 200 || json.Unmarshal(r.Body, &a) != nil {
			t.Fatalf("steer %s: %d %s", c.steer, r.Status, r.Body)
		}
		if a.SteerMode != string(c.s.Mode) || a.InferenceID == "" || a.InferenceID == parent {
			t.Errorf("steer %s: %s", c.steer, r.Body)
		}
		if len(a.Response) == 0 && !a.SteerExhausted || len(a.Response) < 3 && !a.SteerExhausted {
			t.Errorf("steer %s: %d candidates without steer_exhausted", c.steer, len(a.Response))
		}
		for _, text := range a.Response {
			if !steer.Matches(c.s, text) {
				t.Errorf("steer %s: candidate %q breaks the constraint", c.steer, text)
			}
		}
		// The next keystroke refines this answer.
		parent = a.InferenceID
	}

	for _, c := range []struct {
		key, extra string
		status     int
		code       string
	}{
		{apiKey, `,"steer":{"words":["i"]}`, 400, "invalid_request"},
		{apiKey, `,"steer":{"words":["i"],"prefix":"I"},"parent_inference_id":"` + turn.InferenceID + `"`, 400, "invalid_request"},
		{apiKey, `,"steer":{},"parent_inference_id":"` + turn.InferenceID + `"`, 400, "invalid_request"},
		{apiKey, `,"steer":{"replace":{"text":"I want tea","word":3}},"parent_inference_id":"` + turn.InferenceID + `"`, 400, "invalid_request"},
		{apiKey, `,"steer":{"words":["i"]},"parent_inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAA"`, 404, "not_found"},
		{other, `,"steer":{"words":["i"]},"parent_inference_id":"` + turn.InferenceID + `"`, 404, "not_found"},
	} {
		r := infer(c.key, c.extra)
		if r.Status != c.status || !strings.Contains(string(r.Body), `"error":"`+c.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", c.extra, r.Status, r.Body, c.status, c.code)
		}
	}

	// The turn counts once: the steered calls are in the steer stream.
	stats := p.JSON("GET", "/v1/admin/stats?window=1h", admin, nil, 200)
	if stats["total_requests"] != float64(1) {
		t.Errorf("stats count %v requests, want the one turn", stats["total_requests"])
	}
	logs := p.JSON("GET", "/v1/admin/logs?window=1h&stream=steer", admin, nil, 200)
	if n := int(logs["count"].(float64)); n < 6 {
		t.Errorf("%d entries in the steer stream, want the 6 steered calls and more", n)
	}
	if out := p.Output(); strings.Contains(out, "I would li") || strings.Contains(out, "bedr") {
		t.Errorf("replyd's output contains steering text")
	}
}
