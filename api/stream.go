package api

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine"
)

// MIMEEventStream is the media type of Server-Sent Events.
const MIMEEventStream = "text/event-stream"

// streamedStatusKey holds, for an event stream that ended in an error
// event, the status that error stands for: the access log and the metrics
// record it instead of the 200 the stream started with.
const streamedStatusKey = "replyd.streamed_status"

// wantsEventStream reports whether an Accept header prefers
// text/event-stream to application/json: its quality is positive and higher
// than JSON's (taken from application/json, application/*, */*, or 0 when
// none of them is listed). Equal qualities keep the plain JSON answer.
func wantsEventStream(accept string) bool {
	stream, json := -1.0, -1.0
	jsonSpecificity := 0
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
				q = f
			}
		}
		switch mt {
		case MIMEEventStream:
			stream = max(stream, q)
		case echo.MIMEApplicationJSON, "application/*", "*/*":
			// The most specific range that names JSON decides its quality.
			spec := map[string]int{"*/*": 1, "application/*": 2, echo.MIMEApplicationJSON: 3}[mt]
			if spec > jsonSpecificity {
				jsonSpecificity, json = spec, q
			} else if spec == jsonSpecificity {
				json = max(json, q)
			}
		}
	}
	return stream > 0 && stream > json
}

// eventStream writes Server-Sent Events. The response starts (status 200
// and the event-stream headers) with the first event, so that every error
// before it is still an ordinary JSON error answer.
type eventStream struct {
	c       echo.Context
	started bool
}

// send writes one event with v as its JSON data and flushes it to the
// client.
func (s *eventStream) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w := s.c.Response()
	if !s.started {
		s.started = true
		h := w.Header()
		h.Set(echo.HeaderContentType, MIMEEventStream)
		h.Set(echo.HeaderCacheControl, "no-cache")
		// Reverse proxies (nginx) would otherwise hold the events back.
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	if _, err := w.Write([]byte("event: " + event + "\ndata: " + string(data) + "\n\n")); err != nil {
		return err
	}
	return http.NewResponseController(w.Writer).Flush()
}

// transcriptEvent is the data of the "transcript" event: the transcript,
// the language it was transcribed in and any warning about that language,
// as in the InferResponse.
type transcriptEvent struct {
	Transcript         string `json:"transcript"`
	TranscriptLanguage string `json:"transcript_language,omitempty"`
	TranscriptWarning  string `json:"transcript_warning,omitempty"`
}

// newTranscriptEvent is the "transcript" event for what speech-to-text heard.
func newTranscriptEvent(h engine.Heard) transcriptEvent {
	return transcriptEvent{Transcript: h.Transcript, TranscriptLanguage: h.Language, TranscriptWarning: h.Warning}
}

// candidateEvent is the data of a "candidate" event: one reply as soon as
// it is complete, rank 1 for the first sent, with the turn's inference id
// (feedback on it works at once) and, on the live session, the turn.
type candidateEvent struct {
	InferenceID string `json:"inference_id"`
	Rank        int    `json:"rank"`
	Text        string `json:"text"`
	Language    string `json:"language"`
}

func newCandidateEvent(id string, c engine.Candidate) candidateEvent {
	return candidateEvent{InferenceID: id, Rank: c.Rank, Text: c.Text, Language: c.Language}
}

// eventQueue writes a request's events on a goroutine of its own, in the
// order they were pushed: the candidates are pushed by the language
// model's goroutine (engine.Request.OnCandidate), which must never wait for
// a slow client. push never blocks while fewer than the queue's size are
// pending.
type eventQueue struct {
	ch    chan func()
	done  chan struct{}
	close func() // waits for the pushed events to be written; idempotent
}

// newEventQueue starts a queue with room for size pending events.
func newEventQueue(size int) *eventQueue {
	q := &eventQueue{ch: make(chan func(), size), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for f := range q.ch {
			f()
		}
	}()
	q.close = sync.OnceFunc(func() {
		close(q.ch)
		<-q.done
	})
	return q
}

// push queues f. Nothing may be pushed after close.
func (q *eventQueue) push(f func()) { q.ch <- f }

// sentReplies are the candidates a turn sent so far, for its record when
// it ends before its answer. Safe for concurrent use.
type sentReplies struct {
	mu    sync.Mutex
	cands []engine.Candidate
}

func (r *sentReplies) add(c engine.Candidate) {
	r.mu.Lock()
	r.cands = append(r.cands, c)
	r.mu.Unlock()
}

func (r *sentReplies) list() []engine.Candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cands)
}
