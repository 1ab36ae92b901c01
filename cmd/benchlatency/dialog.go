package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/sse"
)

// turnTimes is what one turn took, in milliseconds: the server's stage
// timings (timings_ms) and, seen from the client (from the moment the
// request, recording included, was sent), the time until the transcript
// event, the first and the last candidate event (each reply as it is
// complete), and the candidates.
type turnTimes struct {
	Decode, STT, Prompt, Generation, Queue, Server float64
	ToTranscript, FirstReply, LastReply, Wall      float64
	// gen is the server's "generated" debug line of the turn.
	gen generated
}

// fields lists the columns printed, in order.
var fields = []struct {
	name string
	get  func(t *turnTimes) *float64
}{
	{"decode", func(t *turnTimes) *float64 { return &t.Decode }},
	{"stt", func(t *turnTimes) *float64 { return &t.STT }},
	{"transcript at", func(t *turnTimes) *float64 { return &t.ToTranscript }},
	{"prompt", func(t *turnTimes) *float64 { return &t.Prompt }},
	{"generation", func(t *turnTimes) *float64 { return &t.Generation }},
	{"queue", func(t *turnTimes) *float64 { return &t.Queue }},
	{"first reply at", func(t *turnTimes) *float64 { return &t.FirstReply }},
	{"last reply at", func(t *turnTimes) *float64 { return &t.LastReply }},
	{"total (server)", func(t *turnTimes) *float64 { return &t.Server }},
	{"total (client)", func(t *turnTimes) *float64 { return &t.Wall }},
}

func medianTimes(ts []turnTimes) turnTimes {
	var out turnTimes
	for _, f := range fields {
		vals := make([]float64, 0, len(ts))
		for i := range ts {
			vals = append(vals, *f.get(&ts[i]))
		}
		slices.Sort(vals)
		m := 0.0
		if n := len(vals); n > 0 {
			m = vals[n/2]
			if n%2 == 0 {
				m = (vals[n/2-1] + vals[n/2]) / 2
			}
		}
		*f.get(&out) = m
	}
	return out
}

// printTable prints the two variants' medians side by side with their ratio
// and the first turns in brackets.
func printTable(w io.Writer, a, b string, rows, first []turnTimes) {
	fmt.Fprintf(w, "%-16s %18s %18s %8s\n", "stage", a, b, "ratio")
	for _, f := range fields {
		va, vb := *f.get(&rows[0]), *f.get(&rows[1])
		ratio := "-"
		if vb > 0 {
			ratio = fmt.Sprintf("%.2f", va/vb)
		}
		fmt.Fprintf(w, "%-16s %8.0f (%7.0f) %8.0f (%7.0f) %8s\n", f.name, va, *f.get(&first[0]), vb, *f.get(&first[1]), ratio)
	}
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	Audio   bool   `json:"audio,omitempty"`
}

// dialog is one conversation with one server.
type dialog struct {
	srv        *server
	key        string
	id         string
	candidates int
	clip       clip
	typed      bool
	history    []message
	n          int
	generated  int // "generated" lines in the server's log so far
	// say, when set, gives the partner's typed words of turn n (from 1)
	// instead of the clip's.
	say func(n int) string
}

func newDialog(s *server, key, id string, candidates int, c clip, typed bool) *dialog {
	return &dialog{srv: s, key: key, id: id, candidates: candidates, clip: c, typed: typed}
}

// turn sends the partner's next utterance with the dialog so far, reads the
// event stream, and adds the partner's words and the first candidate to the
// dialog.
func (d *dialog) turn(ctx context.Context) (turnTimes, error) {
	payload, words, err := d.next()
	if err != nil {
		return turnTimes{}, err
	}
	var recording []byte
	if !d.typed {
		recording = d.clip.wav
	}
	ctype, body := replydproc.InferForm(payload, recording)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.srv.URL+"/v1/infer", bytes.NewReader(body))
	if err != nil {
		return turnTimes{}, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-API-KEY", d.key)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return turnTimes{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return turnTimes{}, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var tt turnTimes
	var answer struct {
		Transcript *string  `json:"transcript"`
		Response   []string `json:"response"`
		Timings    struct {
			Decode, STT, Prompt, Generation, Queue, Total float64
		} `json:"timings_ms"`
	}
	r := bufio.NewReader(resp.Body)
	for done := false; !done; {
		name, data, err := readEvent(r)
		if err != nil {
			return turnTimes{}, err
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		switch name {
		case "transcript":
			tt.ToTranscript = ms
		case "candidate":
			if tt.FirstReply == 0 {
				tt.FirstReply = ms
			}
			tt.LastReply = ms
		case "candidates":
			tt.Wall = ms
			if err := json.Unmarshal([]byte(data), &answer); err != nil {
				return turnTimes{}, fmt.Errorf("candidates event: %w", err)
			}
			done = true
		case "error":
			return turnTimes{}, fmt.Errorf("error event: %s", data)
		}
	}
	t := answer.Timings
	tt.Decode, tt.STT, tt.Prompt, tt.Generation, tt.Queue, tt.Server = t.Decode, t.STT, t.Prompt, t.Generation, t.Queue, t.Total
	// The server's output reaches its buffer through a pipe, maybe after
	// the answer.
	g, n, err := lastGenerated(d.srv.Output())
	for deadline := time.Now().Add(10 * time.Second); err == nil && n == d.generated && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		g, n, err = lastGenerated(d.srv.Output())
	}
	if err != nil {
		return turnTimes{}, err
	}
	if n != d.generated+1 {
		return turnTimes{}, fmt.Errorf("the server logged %d \"generated\" lines for %d turns (is its log level debug and its format json?)", n, d.n)
	}
	d.generated, tt.gen = n, g
	d.record(words, answer.Transcript, answer.Response)
	return tt, nil
}

// next starts the dialog's next turn: the payload of the partner's next
// utterance with the dialog so far, and the words said.
func (d *dialog) next() ([]byte, string, error) {
	d.n++
	partner := message{Role: "speaker", Audio: true}
	words := d.clip.words
	if d.say != nil {
		words = d.say(d.n)
	}
	if d.typed {
		partner = message{Role: "speaker", Content: words}
	}
	payload, err := json.Marshal(map[string]any{
		"messages":                  append(slices.Clone(d.history), partner),
		"dialog_id":                 d.id,
		"step_id":                   fmt.Sprint(d.n),
		"language":                  "en",
		"disabled_person_biography": "Sam, 34, former maths teacher, has ALS and lives at home with his partner Alex.",
		"persona":                   "dry humour, brief, warm with family",
		"user_profile":              "likes jazz, chess and strong tea",
		"options":                   map[string]any{"max_candidates": d.candidates},
	})
	return payload, words, err
}

// record adds a turn to the dialog: what the partner said (the transcript
// when there is one, else words) and the first candidate as the reply.
func (d *dialog) record(words string, transcript *string, response []string) {
	said := words
	if transcript != nil {
		said = *transcript
	}
	reply := "Okay."
	if len(response) > 0 && strings.TrimSpace(response[0]) != "" {
		reply = response[0]
	}
	d.history = append(d.history, message{Role: "speaker", Content: said}, message{Role: "disabled_person", Content: reply})
}

// readEvent reads one Server-Sent Event.
func readEvent(r *bufio.Reader) (name, data string, err error) {
	if name, data, err = sse.Next(r); err != nil {
		return "", "", fmt.Errorf("the event stream ended early: %w", err)
	}
	return name, data, nil
}
