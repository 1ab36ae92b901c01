package api

// Steering (issue 22): a request whose payload has `steer` refines the
// candidates of an earlier turn (`parent_inference_id`) under a constraint
// the language model enforces while sampling. It counts as that turn: it
// writes no inference of its own to the statistics (its log entry goes to
// the "steer" stream) and spends the key's steering budget, sized for a
// keystroke every 600 ms, not its inference rate limit. Feedback naming a
// steered answer is recorded as the outcome of the turn it refined.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/store"
)

// errMalformedSteer marks (as the logged cause of a 400 invalid_request) a
// malformed steer object or parent inference id, so that the request is
// logged as a steered one. The client sees the one code of every malformed
// request, invalid_request (shared/spec/interface.md), with a message that
// names the field.
var errMalformedSteer = errors.New("malformed steered request")

// The steering budget per API key: a token bucket refilled at
// steerPerMinute a minute holding at most steerBurst requests, kept by the
// store's RateLimiter (in memory for bbolt, shared by the boxes of a
// PostgreSQL store) under the key's hash and budgetSteer.
const (
	steerPerMinute = 100
	steerBurst     = 10
	budgetSteer    = "#steer"
)

// wireSteer is the payload's steer object; each member is raw so that a
// member sent as null still counts as sent.
type wireSteer struct {
	Words   json.RawMessage `json:"words"`
	Prefix  json.RawMessage `json:"prefix"`
	Replace json.RawMessage `json:"replace"`
}

type wireReplace struct {
	Text    *string `json:"text"`
	Word    *int    `json:"word"`
	Initial *string `json:"initial"`
}

func invalidSteer(format string, args ...any) *Error {
	return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...), Err: errMalformedSteer}
}

// parseSteer validates the payload's steer and parent_inference_id into req.
// Errors are 400 invalid_request naming the field; they never quote text.
func parseSteer(raw json.RawMessage, parent string, req *engine.Request) error {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		if parent != "" {
			return invalidSteer("parent_inference_id is only for a steered request: send it with steer")
		}
		return nil
	}
	var w wireSteer
	if err := json.Unmarshal(raw, &w); err != nil {
		return invalidSteer("steer must be an object with exactly one of words, prefix or replace")
	}
	var s engine.Steer
	n := 0
	if w.Words != nil {
		n++
		s.Mode = engine.SteerWords
		if err := json.Unmarshal(w.Words, &s.Words); err != nil || s.Words == nil {
			return invalidSteer("steer.words must be an array of strings")
		}
	}
	if w.Prefix != nil {
		n++
		s.Mode = engine.SteerPrefix
		if err := json.Unmarshal(w.Prefix, &s.Prefix); err != nil || bytes.Equal(w.Prefix, []byte("null")) {
			return invalidSteer("steer.prefix must be a string")
		}
	}
	if w.Replace != nil {
		n++
		s.Mode = engine.SteerReplace
		var r wireReplace
		if err := json.Unmarshal(w.Replace, &r); err != nil || bytes.Equal(w.Replace, []byte("null")) {
			return invalidSteer("steer.replace must be an object with text, word and optionally initial")
		}
		if r.Text == nil {
			return invalidSteer("steer.replace.text is required")
		}
		if r.Word == nil {
			return invalidSteer("steer.replace.word is required (the 0-based index of the word to replace)")
		}
		s.Text, s.Word = *r.Text, *r.Word
		if r.Initial != nil {
			s.Initial = *r.Initial
			if s.Initial == "" {
				return invalidSteer("steer.replace.initial must be a single letter or digit (omit it for the word's own)")
			}
		}
	}
	if n != 1 {
		return invalidSteer("steer must have exactly one of words, prefix or replace (it has %d)", n)
	}
	if err := steer.Validate(s); err != nil {
		return invalidSteer("%s", err.Error())
	}
	if parent == "" {
		return invalidSteer("parent_inference_id is required with steer: the inference_id of the turn it refines")
	}
	if !inferenceIDPattern.MatchString(parent) {
		return invalidSteer("parent_inference_id is malformed: it is the inference_id of a /v1/infer answer")
	}
	req.Steer = &s
	req.ParentInferenceID = parent
	return nil
}

// steerParent resolves a steered request's parent_inference_id for the key
// keyHash to the turn it counts as: the id itself, or the turn a steered
// answer refined. Both are read from the store, so a keystroke finds its
// parent on any box and after a restart. Unknown, foreign and expired ids
// are one 404.
func (s *Server) steerParent(ctx context.Context, keyHash, id string) (turn string, err error) {
	now := s.now()
	// An answer of this box whose log entry is on its way: wait for it.
	if _, err := s.recent.get(ctx, id, now); err != nil {
		return "", &Error{Code: CodeCanceled, Message: "the client closed the request", Err: err}
	}
	inf, err := s.openInference(keyHash, id, now)
	if err != nil {
		return "", err
	}
	if inf.Turn == "" {
		return id, nil
	}
	if _, err := s.openInference(keyHash, inf.Turn, now); err != nil {
		return "", err
	}
	return inf.Turn, nil
}

// openInference returns the stored inference (or steered answer) id when
// it is keyHash's and within the feedback window at now, else the 404 that
// does not say which.
func (s *Server) openInference(keyHash, id string, now time.Time) (store.Inference, error) {
	inf, err := s.store.Inference(id)
	if errors.Is(err, store.ErrNotFound) {
		return inf, errNoInference()
	}
	if err != nil {
		return inf, err
	}
	if inf.KeyHash != keyHash || now.Sub(inf.At) > store.FeedbackWindow {
		return inf, errNoInference()
	}
	return inf, nil
}

// startSteer admits a steered request: text only, within the key's
// steering budget (its charge to the inference rate limit is given back),
// refining a turn of the same key. It returns the turn's inference id.
func (s *Server) startSteer(c echo.Context, st *inferState, req engine.Request, hasAudio bool) (string, error) {
	if hasAudio {
		return "", invalidSteer("a steered request has no audio part: send the parent turn's messages with its transcript")
	}
	st.steered = true
	now := s.now()
	if err := s.store.Refund(st.keyHash+budgetInfer, now); err != nil {
		s.reqLogger(c).Warn("giving a steered request back to the rate limit failed", "error", err.Error())
	}
	ok, retry, err := s.store.Take(st.keyHash+budgetSteer, steerPerMinute, steerBurst, now)
	if err != nil {
		return "", err
	}
	if !ok {
		s.metrics.rateLimited.Inc()
		return "", &Error{
			Code:       CodeRateLimited,
			Message:    fmt.Sprintf("steering budget of %d requests a minute (bursts of %d) exceeded for this API key; retry in %d s", steerPerMinute, steerBurst, retryAfterSeconds(retry)),
			RetryAfter: retry,
		}
	}
	return s.steerParent(c.Request().Context(), st.keyHash, req.ParentInferenceID)
}

// streamOf is the log stream of an infer call's entry.
func streamOf(st *inferState) string {
	if st.steered {
		return store.StreamSteer
	}
	return store.StreamInfer
}

// steerMetrics are the Prometheus collectors of steering.
type steerMetrics struct {
	requests   *prometheus.CounterVec
	exhaustedN *prometheus.CounterVec
	ksrReplies *prometheus.CounterVec
	ksrChars   *prometheus.CounterVec
	ksrActions *prometheus.CounterVec
}

func newSteerMetrics(reg *prometheus.Registry) *steerMetrics {
	labels := []string{"steer_mode", "prompt_version"}
	m := &steerMetrics{
		requests: counterVec("replyd_steer_requests_total",
			"Steered inference requests by outcome code (ok or the error code); they are not counted in replyd_inferences_total.",
			"outcome"),
		exhaustedN: counterVec("replyd_steer_answers_total",
			"Answered steered requests by steering mode and whether fewer matches than asked could be made (exhausted).",
			"steer_mode", "exhausted"),
		ksrReplies: counterVec("replyd_ksr_replies_total",
			"Spoken replies whose keys and selections were reported, by steering mode (none: unsteered) and prompt version.",
			labels...),
		ksrChars: counterVec("replyd_ksr_chars_total",
			"Characters of those replies. KSR = 1 - replyd_ksr_actions_total / replyd_ksr_chars_total.",
			labels...),
		ksrActions: counterVec("replyd_ksr_actions_total",
			"Keys pressed plus selections made for those replies.",
			labels...),
	}
	reg.MustRegister(m.requests, m.exhaustedN, m.ksrReplies, m.ksrChars, m.ksrActions)
	return m
}

func (m *steerMetrics) exhausted(mode engine.SteerMode, ex bool) {
	m.exhaustedN.WithLabelValues(string(mode), strconv.FormatBool(ex)).Inc()
}

// observeKSR counts one spoken reply of chars characters made with actions
// keys and selections.
func (m *steerMetrics) observeKSR(mode, version string, chars, actions int) {
	m.ksrReplies.WithLabelValues(mode, version).Inc()
	m.ksrChars.WithLabelValues(mode, version).Add(float64(chars))
	m.ksrActions.WithLabelValues(mode, version).Add(float64(actions))
}

// ksrJSON is one group of the stats' ksr section.
type ksrJSON struct {
	SteerMode     string   `json:"steer_mode"`
	PromptVersion string   `json:"prompt_version"`
	Replies       int      `json:"replies"`
	Chars         int      `json:"chars"`
	Actions       int      `json:"actions"`
	KSR           *float64 `json:"ksr"`
}

// ksrOfStats is the stats' ksr section: per steering mode ("none":
// replies picked from the turn's own answer) and prompt version, the
// spoken replies whose actions were reported, their characters, the keys
// and selections, and the keystroke saving rate (null without characters).
func ksrOfStats(k []store.KSRStats) []ksrJSON {
	out := make([]ksrJSON, 0, len(k))
	for _, g := range k {
		j := ksrJSON{SteerMode: g.SteerMode, PromptVersion: g.PromptVersion, Replies: g.Replies, Chars: g.Chars, Actions: g.Actions}
		if g.Chars > 0 {
			r := g.Rate()
			j.KSR = &r
		}
		out = append(out, j)
	}
	return out
}

// maxActions bounds keys_pressed and selections.
const maxActions = 10000

func validateActions(keys, selections *int) error {
	for _, f := range []struct {
		name string
		v    *int
	}{{"keys_pressed", keys}, {"selections", selections}} {
		if f.v != nil && (*f.v < 0 || *f.v > maxActions) {
			return badRequest("%s must be between 0 and %d", f.name, maxActions)
		}
	}
	return nil
}

// steeredFeedback is what feedback needs of a steered answer.
type steeredFeedback struct {
	mode  string
	chars []int // the candidates' lengths in characters
}

// steeredAnswer returns what feedback needs of inf when it is a steered
// answer (nil otherwise).
func steeredAnswer(inf store.Inference) *steeredFeedback {
	if inf.Turn == "" {
		return nil
	}
	return &steeredFeedback{mode: inf.SteerMode, chars: inf.CandidateChars}
}

// setActions records on o the steering mode of the answer it names and
// the actions the client reported.
func setActions(o *store.Outcome, steered *steeredFeedback, keys, selections *int) {
	if steered != nil {
		o.SteerMode = steered.mode
	}
	if keys == nil && selections == nil {
		return
	}
	o.ActionsReported = true
	if keys != nil {
		o.KeysPressed = *keys
	}
	if selections != nil {
		o.Selections = *selections
	}
}
