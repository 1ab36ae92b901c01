package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/models"
)

// TestModelsCompareEndToEnd runs the real program, records turns through
// /v1/infer and /v1/feedback (users with remember: true: three spoke the
// only candidate, one typed their own reply, one spoke a steered reply; one
// turn has no outcome and one user's text is not kept), then compares a second language model with
// the active one while a tablet keeps asking. The replays use temperature
// 0 and the turns' one candidate, so each turn's candidate is the greedy
// reply: the active model must give again exactly what the user spoke on
// the three turns (exact rate 3/5) and the steered reply when replayed
// with its prefix, which fails if its figures came from
// another model, another prompt or other settings; the candidate, other
// random weights, does not. The figures are consistent (turns counted,
// rates in [0, 1], the same characters typed, time per turn > 0), the
// tablet is answered 200 throughout, and no dialog text is shown.
func TestModelsCompareEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	p := startModelsBox(t, "compare", 0xc0e, nil)
	admin, apiKey := p.admin, p.apiKey
	infer := func(payload string) (id, first string) {
		t.Helper()
		r, err := p.Do(context.Background(), inferRequest(apiKey, payload, nil))
		if err != nil || r.Status != 200 {
			t.Fatalf("infer: %v %d %s", err, r.Status, r.Body)
		}
		var out struct {
			InferenceID string   `json:"inference_id"`
			Response    []string `json:"response"`
		}
		if err := json.Unmarshal(r.Body, &out); err != nil || len(out.Response) != 1 {
			t.Fatalf("infer: %v %s", err, r.Body)
		}
		return out.InferenceID, out.Response[0]
	}
	feedback := func(body map[string]any) {
		t.Helper()
		p.JSON("POST", "/v1/feedback", map[string]string{"X-API-KEY": apiKey}, body, 200)
	}
	const marker = "PARTNER-TEXT-MARKER"
	one := func(user, line string, remember bool) string {
		return fmt.Sprintf(`{"remember":%t,"user_id":%q,"messages":[{"role":"speaker","content":%q}],"options":{"max_candidates":1,"temperature":0}}`, remember, user, line)
	}
	typed := 0
	for i, line := range []string{"Shall we go out later?", "Do you want tea or coffee?", "How did you sleep?"} {
		id, cand := infer(one(fmt.Sprintf("user-%d", i), line+" "+marker, true))
		if score.Normalize(cand) == "" {
			t.Fatalf("the demo model's greedy reply %q is empty once normalized: an exact hit would prove nothing", cand)
		}
		feedback(map[string]any{"inference_id": id, "chosen_rank": 1})
		typed += score.Chars(cand)
	}
	const own = "I would rather stay in and read my book"
	id, _ := infer(one("user-3", "What are you doing this afternoon? "+marker, true))
	feedback(map[string]any{"inference_id": id, "spoken_text": own})
	typed += score.Chars(own)
	// A turn answered from a steered answer: the user typed a prefix the
	// turn's own candidate does not begin with and spoke the steered reply.
	steerPayload := one("user-6", "Where shall we meet? "+marker, true)
	id, _ = infer(steerPayload)
	sid, steered := infer(strings.TrimSuffix(steerPayload, "}") + `,"steer":{"prefix":"Wel"},"parent_inference_id":"` + id + `"}`)
	if !strings.HasPrefix(steered, "Wel") {
		t.Fatalf("steered reply %q does not begin with the prefix", steered)
	}
	feedback(map[string]any{"inference_id": sid, "chosen_rank": 1})
	typed += score.Chars(steered)
	t.Logf("steered reply %q", steered)
	infer(one("user-4", "No answer to this one "+marker, true))
	id, _ = infer(one("user-5", "Not remembered "+marker, false))
	feedback(map[string]any{"inference_id": id, "chosen_rank": 1})

	// The active model, a Whisper file and a file that is not there.
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/llm-demo.gguf/compare", Header: admin}, 409)
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/whisper-demo.bin/compare", Header: admin}, 400)
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/absent.gguf/compare", Header: admin}, 404)
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/candidate.gguf/compare", Header: admin,
		Body: []byte(`{"turns":0}`), ContentType: "application/json"}, 400)

	// The answer decoded as the models feature writes it (its JSON is
	// documented in api/client.md and api/openapi.yaml).
	b := p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/candidate.gguf/compare", Header: admin,
		Body: []byte(`{"turns":50,"temperature":0}`), ContentType: "application/json"}, 202)
	var c models.Comparison
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.State != "running" || c.Turns != 50 || c.TurnsFound != 5 {
		t.Fatalf("started: %s", b)
	}

	// A tablet keeps asking now and then while the comparison runs: it is
	// answered every time (the replays give way), under the default
	// overload rule (REPLYD_MAX_WAIT_RATIO is not relaxed here).
	load := p.startLoad(t, 1, 150*time.Millisecond, func(_, i int) (string, []byte) {
		return fmt.Sprintf(`{"messages":[{"role":"speaker","content":"Meanwhile %d?"}]}`, i), nil
	})
	deadline := time.Now().Add(5 * time.Minute)
	for c.State == "running" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		b = p.Must(replydproc.Request{Path: "/v1/admin/models/candidate.gguf/compare", Header: admin}, 200)
		if strings.Contains(string(b), marker) || strings.Contains(string(b), own) {
			t.Fatalf("the comparison shows dialog text: %s", b)
		}
		c = models.Comparison{}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
	}
	answered := statuses(load.Stop())
	t.Logf("comparison: %s", b)
	t.Logf("tablet answers while comparing: %v", answered)
	if len(answered) > 1 || (len(answered) == 1 && answered[200] == 0) {
		t.Errorf("tablet answers while comparing: %v, want 200s only", answered)
	}
	if c.State != "done" || c.Candidate == nil || c.Active == nil {
		t.Fatalf("comparison did not finish: %s", b)
	}
	if c.Done != c.Total || c.Total != 12 {
		t.Errorf("progress %d of %d, want 12 of 12 (5 turns on 2 models, the steered one twice)", c.Done, c.Total)
	}
	for _, f := range []*models.CompareFigures{c.Active, c.Candidate} {
		if f.Turns != 5 || f.KeystrokesTyped != typed || f.SteeredTurns != 1 || f.TurnMS <= 0 || f.ReplyTokens <= 0 {
			t.Errorf("%s: %+v (want 5 turns, %d characters typed, 1 steered)", f.Model, *f, typed)
		}
		for _, r := range []float64{f.ExactRate, f.Top1Rate, f.NearRate, f.KeystrokeSaving} {
			if r < 0 || r > 1 {
				t.Errorf("%s: a rate out of [0, 1]: %+v", f.Model, *f)
			}
		}
		// Keys spent steering and then typing the reply whole save less
		// than nothing.
		if f.SteeredKSR > 1 || f.SteeredKSR < -1 {
			t.Errorf("%s: steered KSR out of [-1, 1]: %+v", f.Model, *f)
		}
		if f.NearRate < f.ExactRate || f.ExactRate != f.Top1Rate {
			t.Errorf("%s: near %v < exact %v, or exact != top-1 %v with one candidate", f.Model, f.NearRate, f.ExactRate, f.Top1Rate)
		}
	}
	if c.Active.Model != "llm-demo.gguf" || c.Candidate.Model != "candidate.gguf" {
		t.Errorf("models: active %s, candidate %s", c.Active.Model, c.Candidate.Model)
	}
	// Each spoken turn is the active model's greedy reply again; the
	// steered reply, replayed with the prefix it begins with, too.
	if c.Active.ExactRate != 0.6 || c.Active.SteeredHits != 1 {
		t.Errorf("active exact rate %v, steered hits %d, want 0.6 and 1: the three spoken replies were its greedy candidates, and the steered one its greedy reply after the prefix", c.Active.ExactRate, c.Active.SteeredHits)
	}
	if c.Candidate.SteeredHits != 0 {
		t.Errorf("candidate steered hits %d: other random weights give other replies", c.Candidate.SteeredHits)
	}
	if c.Candidate.ExactRate >= c.Active.ExactRate {
		t.Errorf("candidate exact rate %v >= the active model's %v: other random weights give other replies", c.Candidate.ExactRate, c.Active.ExactRate)
	}
	logs := string(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=admin", Header: admin}, 200))
	for _, w := range []string{"model comparison started: llm candidate.gguf on the latest 5 recorded turns", "model compared: llm candidate.gguf on 5 turns"} {
		if !strings.Contains(logs, w) {
			t.Errorf("the admin log lacks %q", w)
		}
	}
	// Nothing was switched.
	var list struct {
		Models []struct {
			File   string
			Active bool
		}
		Compare bool
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &list); err != nil {
		t.Fatal(err)
	}
	if !list.Compare {
		t.Error("compare is false")
	}
	for _, m := range list.Models {
		if m.Active != (m.File == "llm-demo.gguf" || m.File == "whisper-demo.bin") {
			t.Errorf("%s active %v after comparing", m.File, m.Active)
		}
	}
}
