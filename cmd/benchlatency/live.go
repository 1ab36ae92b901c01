package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/api/web"
)

// The turn from the end of the partner's speech (issue 23), on the two
// paths a tablet has:
//
//   - upload: the conversation page records until its loudness test has
//     heard SILENCE_MS of quiet (api/web/app/recorder.js), then uploads;
//     the benchmark adds that wait to the time from its upload (the clip,
//     as WAV over loopback) to the transcript and candidates events;
//   - live: the clip is streamed over GET /v1/live in 100 ms frames at
//     real-time rate, followed by silence, as the page's AudioWorklet
//     streams the microphone; the clock starts when the clip's sound ends
//     (its last sample above -34 dBFS, in real time from the first frame).

// eosTimes is one turn timed from the end of speech, in milliseconds: when
// the answer was under way (the upload sent, or the end_of_turn event),
// the transcript and candidates events, and, live, how long after the
// last voiced audio arrived the work on the final turn started (replyd's
// "live turn work started" line).
type eosTimes struct {
	Sent, Transcript, Candidates, WorkStart float64
	// STT and LLM are the timed turn's own model times, from its answer's
	// timings_ms (stt; prompt + generation): random-weight Whisper decodes
	// very different token counts for audio that differs a little (the
	// live turn holds its speech, the upload the whole clip), so the paths
	// are also compared with these taken out.
	STT, LLM float64
	pass     string
	// turns is how many turns the live path found in the clip (a pause
	// inside it may end one early; the last is timed).
	turns int
}

// quietWait is the conversation page's quiet wait before it uploads a
// recording: SILENCE_MS in api/web/app/recorder.js.
func quietWait() (time.Duration, error) {
	b, err := fs.ReadFile(web.AppFS(), "recorder.js")
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^const SILENCE_MS = (\d+);`).FindSubmatch(b)
	if m == nil {
		return 0, errors.New("api/web/app/recorder.js defines no SILENCE_MS")
	}
	n, err := strconv.Atoi(string(m[1]))
	return time.Duration(n) * time.Millisecond, err
}

// uploadFromEOS is an upload turn (dialog.turn) timed from the end of
// speech: the page's quiet wait, then the turn as the server answered it.
func (d *dialog) uploadFromEOS(ctx context.Context, wait time.Duration) (eosTimes, error) {
	// Other turns on this server logged "generated" lines too.
	if _, n, err := lastGenerated(d.srv.Output()); err == nil {
		d.generated = n
	}
	tt, err := d.turn(ctx)
	if err != nil {
		return eosTimes{}, err
	}
	w := float64(wait.Milliseconds())
	return eosTimes{Sent: w, Transcript: w + tt.ToTranscript, Candidates: w + tt.Wall, STT: tt.STT, LLM: tt.Prompt + tt.Generation}, nil
}

// liveEvent is one event of a live session as it arrived.
type liveEvent struct {
	name string
	data []byte
	at   time.Time
}

// liveTurn streams the partner's clip over a live session with the dialog
// so far and times its events from the end of speech.
func (d *dialog) liveTurn(ctx context.Context) (eosTimes, error) {
	payload, words, err := d.next()
	if err != nil {
		return eosTimes{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.srv.URL+"/v1/live/ticket", nil)
	if err != nil {
		return eosTimes{}, err
	}
	req.Header.Set("X-API-KEY", d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return eosTimes{}, err
	}
	var ticket struct {
		URL string `json:"url"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ticket)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || ticket.URL == "" {
		return eosTimes{}, fmt.Errorf("live ticket: status %d (%v)", resp.StatusCode, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(d.srv.URL, "http")+ticket.URL, nil)
	if err != nil {
		return eosTimes{}, fmt.Errorf("live session: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	if err := conn.Write(ctx, websocket.MessageText, payload); err != nil {
		return eosTimes{}, err
	}
	events := make(chan liveEvent, 16)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			var ev struct {
				Event string          `json:"event"`
				Data  json.RawMessage `json:"data"`
			}
			if json.Unmarshal(b, &ev) == nil {
				events <- liveEvent{ev.Event, ev.Data, time.Now()}
			}
		}
	}()
	// 100 ms frames, each sent when its last sample has been "spoken":
	// the clip, then silence until the answer came.
	const frame = 1600
	pcm := d.clip.pcm
	start := time.Now()
	eos := start.Add(time.Duration(d.clip.speechEnd) * time.Second / 16000)
	// A pause inside the clip may end a turn early (jfk.wav holds one of
	// about 1 s), and the last turn may then hold too little speech to be
	// answered (no_speech): what the partner sees is what the page shows,
	// the last transcript and the last candidates with replies, once the
	// clip's sound has been sent and every turn it ended has been answered
	// (candidates, or an error: an earlier turn is superseded by a later
	// one with speech).
	got := map[string]liveEvent{} // the last of each event timed
	turns, answered := 0, 0       // end_of_turn events, and their answers
	inTurn := false
	workBefore := len(workLines(d.srv.Output()))
	tick := time.NewTimer(100 * time.Millisecond)
	defer tick.Stop()
	for k := 0; ; {
		select {
		case ev := <-events:
			switch ev.name {
			case "speech_start":
				inTurn = true
			case "end_of_turn":
				inTurn = false
				turns++
				got[ev.name] = ev
			case "transcript":
				got[ev.name] = ev
			case "error":
				if !bytes.Contains(ev.data, []byte(`"superseded"`)) {
					return eosTimes{}, fmt.Errorf("error event: %s", ev.data)
				}
				answered++
			case "candidates":
				answered++
				var a struct {
					Response []string `json:"response"`
				}
				if json.Unmarshal(ev.data, &a) == nil && len(a.Response) > 0 {
					got[ev.name] = ev
				}
			}
		case err := <-readErr:
			return eosTimes{}, fmt.Errorf("live session ended before the candidates: %w", err)
		case <-tick.C:
			b := make([]byte, 2*frame)
			for i := range frame {
				if j := k*frame + i; j < len(pcm) {
					v := max(-1, min(1, pcm[j]))
					binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(v*32767)))
				}
			}
			if err := conn.Write(ctx, websocket.MessageBinary, b); err != nil {
				return eosTimes{}, err
			}
			k++
			tick.Reset(time.Until(start.Add(time.Duration(k+1) * 100 * time.Millisecond)))
		}
		// A second past the end of speech, any turn the clip's speech
		// starts has started (Silero's lag and MinSpeech are under it).
		if !time.Now().After(eos.Add(time.Second)) || inTurn || turns == 0 || answered < turns {
			continue
		}
		if _, ok := got["candidates"]; !ok {
			return eosTimes{}, fmt.Errorf("no turn of the clip's %d was answered with replies", turns)
		}
		break
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	since := func(name string) float64 {
		ev, ok := got[name]
		if !ok {
			return 0
		}
		return float64(ev.at.Sub(eos).Microseconds()) / 1000
	}
	et := eosTimes{Sent: since("end_of_turn"), Transcript: since("transcript"), Candidates: since("candidates"), turns: turns}
	var answer struct {
		Transcript *string  `json:"transcript"`
		Response   []string `json:"response"`
		Timings    struct {
			STT        float64 `json:"stt"`
			Prompt     float64 `json:"prompt"`
			Generation float64 `json:"generation"`
		} `json:"timings_ms"`
	}
	if err := json.Unmarshal(got["candidates"].data, &answer); err != nil {
		return eosTimes{}, fmt.Errorf("candidates event: %w", err)
	}
	et.STT, et.LLM = answer.Timings.STT, answer.Timings.Prompt+answer.Timings.Generation
	d.record(words, answer.Transcript, answer.Response)
	// The server's line of this turn (its output reaches the buffer
	// through a pipe, maybe after the answer).
	// (the last line: earlier turns of the clip logged theirs before).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if w := workLines(d.srv.Output()); len(w) > workBefore {
			et.WorkStart, et.pass = w[len(w)-1].AfterVoiceMS, w[len(w)-1].Pass
			break
		}
	}
	return et, nil
}

// workLine is replyd's "live turn work started" debug line.
type workLine struct {
	Pass         string  `json:"pass"`
	AfterVoiceMS float64 `json:"after_voice_ms"`
}

// workLines returns the "live turn work started" lines of a server's JSON
// log (a line cut short, still arriving through the pipe, is left out).
func workLines(log string) []workLine {
	ws, _ := logLines[workLine](log, "live turn work started")
	return ws
}

// benchEOS runs the turn from the end of speech on s: an upload dialog and
// a live dialog, their turns alternating, and prints the medians of the
// going-on turns (the first turns in brackets).
func benchEOS(ctx context.Context, cfg config, s *server, label, shape string, clip clip, stdout io.Writer) error {
	wait, err := quietWait()
	if err != nil {
		return err
	}
	key, err := s.CreateAPIKey(ctx, "benchlatency-eos", 1000)
	if err != nil {
		return err
	}
	up := newDialog(s, key, "bench-eos-upload-"+shape, cfg.candidates, clip, false)
	live := newDialog(s, key, "bench-eos-live-"+shape, cfg.candidates, clip, false)
	var ups, lives []eosTimes
	var first [2]eosTimes
	for turn := 0; turn <= cfg.turns; turn++ {
		// Alternate which path goes first.
		order := []bool{turn%2 == 0, turn%2 != 0}
		for _, isLive := range order {
			var et eosTimes
			var err error
			if isLive {
				et, err = live.liveTurn(ctx)
			} else {
				et, err = up.uploadFromEOS(ctx, wait)
			}
			if err != nil {
				return fmt.Errorf("from the end of speech, live %v, turn %d: %w", isLive, turn, err)
			}
			switch {
			case turn == 0 && isLive:
				first[1] = et
			case turn == 0:
				first[0] = et
			case isLive:
				lives = append(lives, et)
			default:
				ups = append(ups, et)
			}
		}
	}
	med := func(ts []eosTimes, get func(eosTimes) float64) float64 {
		v := make([]float64, len(ts))
		for i, t := range ts {
			v[i] = get(t)
		}
		return median(v)
	}
	fmt.Fprintf(stdout, "\n%s, from the end of the partner's speech (server %q, going-on turns alternating, medians of %d, ms; first turn in brackets; host %s):\n",
		shape, label, cfg.turns, hostLoad())
	fmt.Fprintf(stdout, "%-26s %18s %18s %18s\n", "path", "sent / end_of_turn", "transcript", "candidates")
	row := func(name string, ts []eosTimes, f eosTimes) {
		fmt.Fprintf(stdout, "%-26s %8.0f (%7.0f) %8.0f (%7.0f) %8.0f (%7.0f)\n", name,
			med(ts, func(t eosTimes) float64 { return t.Sent }), f.Sent,
			med(ts, func(t eosTimes) float64 { return t.Transcript }), f.Transcript,
			med(ts, func(t eosTimes) float64 { return t.Candidates }), f.Candidates)
	}
	row(fmt.Sprintf("upload (+%d ms quiet)", wait.Milliseconds()), ups, first[0])
	row("live (real-time stream)", lives, first[1])
	fmt.Fprintf(stdout, "%-26s %18s %8.0f %9s %8.0f\n", "live sooner by", "",
		med(ups, func(t eosTimes) float64 { return t.Transcript })-med(lives, func(t eosTimes) float64 { return t.Transcript }), "",
		med(ups, func(t eosTimes) float64 { return t.Candidates })-med(lives, func(t eosTimes) float64 { return t.Candidates }))
	// The same with each turn's own model time taken out: the transcript
	// less its Whisper time, the candidates less Whisper and the language
	// model's; what is left is when the work started and what waited.
	fmt.Fprintf(stdout, "%-26s %18s %8.0f %9s %8.0f\n", "live sooner, models out", "",
		med(ups, func(t eosTimes) float64 { return t.Transcript - t.STT })-med(lives, func(t eosTimes) float64 { return t.Transcript - t.STT }), "",
		med(ups, func(t eosTimes) float64 { return t.Candidates - t.STT - t.LLM })-med(lives, func(t eosTimes) float64 { return t.Candidates - t.STT - t.LLM }))
	fmt.Fprintf(stdout, "models' own time (median ms): Whisper upload %.0f, live %.0f; language model upload %.0f, live %.0f\n",
		med(ups, func(t eosTimes) float64 { return t.STT }), med(lives, func(t eosTimes) float64 { return t.STT }),
		med(ups, func(t eosTimes) float64 { return t.LLM }), med(lives, func(t eosTimes) float64 { return t.LLM }))
	var passes []string
	split := 0
	for _, t := range lives {
		passes = append(passes, t.pass)
		if t.turns > 1 {
			split++
		}
	}
	if split > 0 {
		fmt.Fprintf(stdout, "live: in %d of %d turns a pause inside the clip ended a turn early (REPLYD_LIVE_END_SILENCE); the last turn, which holds less audio, is timed\n", split, len(lives))
	}
	slices.Sort(passes)
	fmt.Fprintf(stdout, "live: the work on the final turn started %.0f ms (median) after its last voiced audio arrived (passes: %s)\n",
		med(lives, func(t eosTimes) float64 { return t.WorkStart }), strings.Join(slices.Compact(passes), ", "))
	fmt.Fprintf(stdout, "upload: the page's quiet wait is SILENCE_MS in api/web/app/recorder.js; the recording goes up as WAV over loopback\n")
	return nil
}
