package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// TestModelsTimeEndToEnd runs the real program and, while clients keep
// sending inferences (text, and audio for the speech engine), times a
// `replyd models synth` Whisper file and a second language model beside the
// active ones. Every request is answered 200 (timing never unloads or
// sheds), the timings carry the candidate's and the active model's figures
// (prompt speed, a decode step for the configured candidates, the history
// budget, Whisper's real-time factor, the turn to expect), they are listed
// with the files afterwards, the active model is not switched, and timing
// the active file itself is 409.
func TestModelsTimeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	var synthName string
	p := startModelsBox(t, "time", 0x71e, func(env map[string]string, folder string) {
		env["REPLYD_MAX_WAIT_RATIO"] = "0"
		var out, errOut bytes.Buffer
		if err := cmdModels([]string{"synth", "--shape", "tiny.en", "--type", "q4_0", "--dir", folder}, &out, &errOut); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		synthName = filepath.Base(strings.TrimSpace(out.String()))
	})
	admin := p.admin
	wav := testWAV(t)
	load := p.startLoad(t, 2, 0, func(w, i int) (string, []byte) {
		// A few with audio: an idle transcription gives way to every
		// one, so a worker sending audio back to back would hold the
		// Whisper timing off for as long as it sends.
		var audio []byte
		if w == 1 && i < 3 {
			audio = wav
		}
		return fmt.Sprintf(`{"messages":[{"role":"speaker","content":"Shall we go out later, %d %d?"}]}`, w, i), audio
	})
	type figures struct {
		Model               string
		PromptTokensPerS    float64 `json:"prompt_tokens_per_s"`
		Candidates          int
		StepMS              float64 `json:"step_ms"`
		HistoryBudgetTokens int     `json:"history_budget_tokens"`
		AudioSeconds        float64 `json:"audio_seconds"`
		RealTimeFactor      float64 `json:"real_time_factor"`
		TurnMS              int64   `json:"turn_ms"`
		Window              string  `json:"window"`
	}
	type timing struct {
		Kind, Node, Reason string
		Candidate, Active  figures
	}
	timeIt := func(name string) timing {
		t.Helper()
		var tm timing
		b := p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/" + name + "/time", Header: admin, Timeout: 5 * time.Minute}, 200)
		if err := json.Unmarshal(b, &tm); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", name, b)
		return tm
	}
	lt := timeIt("candidate.gguf")
	wt := timeIt(synthName)
	answered := statuses(load.Stop())

	for _, f := range []figures{lt.Candidate, lt.Active} {
		if f.PromptTokensPerS <= 0 || f.Candidates < 1 || f.StepMS <= 0 || f.HistoryBudgetTokens <= 0 || f.TurnMS <= 0 {
			t.Errorf("language model figures: %+v", f)
		}
	}
	if lt.Kind != "llm" || lt.Candidate.Model != "candidate.gguf" || lt.Active.Model != "llm-demo.gguf" || !strings.Contains(lt.Reason, "beside") {
		t.Errorf("language model timing: %+v", lt)
	}
	for _, f := range []figures{wt.Candidate, wt.Active} {
		// The window rule it was timed with: stock weights, nothing declared.
		if f.AudioSeconds <= 0 || f.RealTimeFactor <= 0 || f.TurnMS <= 0 || !strings.HasPrefix(f.Window, "auto: max(10 s, speech + 2 s)") {
			t.Errorf("Whisper figures: %+v", f)
		}
	}
	if wt.Kind != "whisper" || wt.Candidate.Model != synthName || wt.Active.Model != "whisper-demo.bin" {
		t.Errorf("Whisper timing: %+v", wt)
	}
	t.Logf("answers while timing: %v", answered)
	if answered[200] == 0 || len(answered) != 1 {
		t.Errorf("answers while timing: %v, want 200s only", answered)
	}

	// The timings are listed with their files; nothing was switched.
	var list struct {
		Models []struct {
			File   string
			Active bool
		}
		Timings map[string]timing
		Time    bool
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &list); err != nil {
		t.Fatal(err)
	}
	if !list.Time || list.Timings["candidate.gguf"].Candidate.StepMS != lt.Candidate.StepMS || list.Timings[synthName].Candidate.RealTimeFactor != wt.Candidate.RealTimeFactor ||
		list.Timings[synthName].Candidate.Window != wt.Candidate.Window || len(list.Timings) != 2 {
		t.Errorf("listed timings: %+v", list.Timings)
	}
	for _, m := range list.Models {
		if m.Active != (m.File == "llm-demo.gguf" || m.File == "whisper-demo.bin") {
			t.Errorf("%s active %v after timing", m.File, m.Active)
		}
	}
	// The active file itself, and a file that is not there.
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/llm-demo.gguf/time", Header: admin}, 409)
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/absent.gguf/time", Header: admin}, 404)
	// Removing a file removes its timing.
	p.Must(replydproc.Request{Method: "DELETE", Path: "/v1/admin/models/candidate.gguf", Header: admin}, 204)
	list.Timings = nil // json.Unmarshal adds to a map it is given
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &list); err != nil {
		t.Fatal(err)
	}
	if _, ok := list.Timings["candidate.gguf"]; ok || len(list.Timings) != 1 {
		t.Errorf("timings after removing candidate.gguf: %+v", list.Timings)
	}
}
