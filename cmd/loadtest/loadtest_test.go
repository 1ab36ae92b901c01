package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testaudio"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 95: 95 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := percentile(d, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v", got)
	}
}

func TestRequireLoopback(t *testing.T) {
	for u, ok := range map[string]bool{
		"http://127.0.0.1:8080":   true,
		"https://[::1]:8443":      true,
		"http://localhost:8080":   true,
		"http://10.0.0.5:8080":    false,
		"http://example.org:8080": false,
		"ftp://127.0.0.1":         false,
		"127.0.0.1:8080":          false,
	} {
		if err := requireLoopback(u); (err == nil) != ok {
			t.Errorf("requireLoopback(%q) = %v", u, err)
		}
	}
}

func TestInferBody(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	wav := testaudio.Mono16(16000, testaudio.Voiced(0.1, 16000))
	for _, audio := range [][]byte{nil, wav} {
		ct, body, err := inferBody(rng, 3, audio)
		if err != nil {
			t.Fatal(err)
		}
		_, params, err := mime.ParseMediaType(ct)
		if err != nil {
			t.Fatal(err)
		}
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		parts := map[string][]byte{}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(p)
			parts[p.FormName()] = b
		}
		var payload struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
				Audio   bool   `json:"audio"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(parts["payload"], &payload); err != nil {
			t.Fatal(err)
		}
		last := payload.Messages[len(payload.Messages)-1]
		if last.Role != "speaker" || last.Audio != (audio != nil) {
			t.Errorf("last message %+v with audio=%v", last, audio != nil)
		}
		if !bytes.Equal(parts["audio"], audio) {
			t.Errorf("audio part: %d bytes, want %d", len(parts["audio"]), len(audio))
		}
	}
}

func TestProblems(t *testing.T) {
	r := newResults()
	r.add(outcome{route: routeInfer, status: 200})
	r.add(outcome{route: routeInfer, status: 503, code: "overloaded"})
	r.statsTotal, r.loggedInfer = 2, 2
	if p := r.problems(); len(p) != 0 {
		t.Errorf("clean run: %v", p)
	}
	r.add(outcome{route: routeInferAudio, status: 503, code: "timeout"})
	r.add(outcome{route: routeLogs, status: 500, code: "internal"})
	r.add(outcome{route: routeKeys, err: io.ErrUnexpectedEOF})
	got := strings.Join(r.problems(), "\n")
	for _, want := range []string{"503 timeout", "500 internal", "no response", "stats count 2 infer calls, the tablets received 3", "2 infer log entries for 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

func TestSwitchProblems(t *testing.T) {
	r := newResults()
	r.switching = true
	r.add(outcome{route: routeInfer, status: 200})
	r.add(outcome{route: routeInferAudio, status: 200, noSpeech: true})
	r.add(outcome{route: routeInfer, status: 503, code: "loading"})
	r.add(outcome{route: routeActivate, status: 200})
	r.statsTotal, r.loggedInfer = 3, 3
	r.switches = 1
	r.byModel = map[string]int{switchModels[1]: 1}
	if p := r.problems(); len(p) != 0 {
		t.Errorf("clean switching run: %v", p)
	}
	r.byModel = map[string]int{switchModels[0]: 1, "other.gguf": 1}
	r.switchErrs = []string{"switch to llm-demo-b.gguf: 500 {}"}
	got := strings.Join(r.problems(), "\n")
	for _, want := range []string{`for model "other.gguf"`, "2 answers counted by model, 1 answers received", "yet llm-demo-b.gguf answered nothing", "500 {}"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	if noSpeechAnswer([]byte(`{"no_speech":false}`)) || !noSpeechAnswer([]byte(`{"transcript":"","no_speech":true}`)) {
		t.Error("noSpeechAnswer")
	}
}
