package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/store"
)

// inferState carries what the infer log line needs from the handler to the
// inferLog middleware. It never holds dialog text.
type inferState struct {
	start        time.Time
	try          bool
	authFailed   bool // no valid key: counted in memory, never logged per request
	keyHash      string
	subject      string
	audio        bool
	audioSeconds float64
	candidates   int
	// streamed is set once an event stream has started: a later error is
	// an error event, and the log records its code.
	streamed bool
	// inference is set once the inference is answered: its id, prompt
	// version, candidate lengths and, for remember: true, its texts (which
	// the store keeps only encrypted).
	inference *store.InferenceInfo
	// inferenceID is a streamed request's id, registered at its start
	// (recentInferences.begin); partial: it ended in an error after some
	// of its replies were sent, and inference is their record.
	inferenceID string
	partial     bool
	// steered: a steered request (steer.go), logged to the steer stream
	// and counted as the turn it refines.
	steered bool
}

const inferStateKey = "replyd.infer_state"

func inferStateOf(c echo.Context) *inferState {
	if st, ok := c.Get(inferStateKey).(*inferState); ok {
		return st
	}
	return &inferState{}
}

// inferLog wraps /v1/infer and /v1/admin/try: it answers the request (errors
// through the error handler), flushes the answer to the client, and then
// appends one log entry for the call: level info on 2xx, warn on 4xx, error
// on 5xx. Two outcomes write no entry of their own, so that a client cannot
// grow the log faster than the key's rate limit lets it: a failed
// authentication (counted in memory and aggregated per client address, see
// authFailed) and a request refused by the key's rate limit after the
// first one in its window. The entry names counts and times, never dialog
// text or transcripts.
func (s *Server) inferLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		st := &inferState{start: s.now(), try: c.Path() == "/v1/admin/try"}
		c.Set(inferStateKey, st)
		err := callSafely(next, c)
		code := "ok"
		if err != nil {
			code = toAPIError(err).Code
			c.Error(err)
		}
		_ = http.NewResponseController(c.Response().Writer).Flush()
		status := c.Response().Status
		if err != nil && st.streamed {
			// The stream answered 200 before the error: log the status
			// the error event stands for, here and in the access log.
			status = toAPIError(err).Status()
			c.Set(streamedStatusKey, status)
		}
		elapsed := s.now().Sub(st.start)
		what := "infer"
		if st.try {
			what = "infer (admin try)"
		}
		level, msg := store.LevelInfo, ""
		switch {
		case status < 400:
			msg = fmt.Sprintf("%s ok: %d candidates in %d ms", what, st.candidates, elapsed.Milliseconds())
			if st.audio {
				msg += fmt.Sprintf(" (audio %.1f s)", st.audioSeconds)
			}
		case status < 500:
			level, msg = store.LevelWarn, fmt.Sprintf("%s failed: %s", what, code)
		default:
			level, msg = store.LevelError, fmt.Sprintf("%s failed: %s", what, code)
		}
		subject := st.subject
		if subject == "" {
			subject = st.keyHash
		}
		errCode := ""
		if err != nil {
			errCode = code
		}
		var inf *store.InferenceInfo
		if status < 300 || st.partial {
			inf = st.inference
		}
		entry := store.LogEntry{
			Timestamp:    s.now(),
			Level:        level,
			Message:      msg,
			ResourceType: store.ResourceAPIKey,
			ResourceID:   st.keyHash,
			StreamName:   streamOf(st),
			Subject:      subject,
			Status:       status,
			LatencyMS:    elapsed.Milliseconds(),
			Node:         s.node,
			ErrorCode:    errCode,
			Inference:    inf,
		}
		if s.keepInferLog(st, code) {
			if err := s.store.AppendLog(entry); err != nil {
				s.reqLogger(c).Error("appending the infer log entry failed", "error", err.Error())
			}
		}
		if st.inference != nil {
			s.recent.markWritten(st.inference.ID)
		} else if st.inferenceID != "" {
			s.recent.markWritten(st.inferenceID) // ended with no reply sent
		}
		if st.steered {
			s.metrics.steer.requests.WithLabelValues(code).Inc()
		} else {
			s.metrics.inferences.WithLabelValues(code).Inc()
		}
		return nil
	}
}

// keepInferLog reports whether the outcome of an infer call gets its own
// log entry (see inferLog).
func (s *Server) keepInferLog(st *inferState, code string) bool {
	switch {
	case st.authFailed:
		return false
	case code == CodeRateLimited && st.keyHash != "":
		return s.refusals.first(st.keyHash, s.now())
	}
	return true
}

// handleInfer serves POST /v1/infer: authenticate the key, apply its rate
// limit, and only then read and decode the body.
func (s *Server) handleInfer(c echo.Context) (err error) {
	st := inferStateOf(c)
	key, hash, err := s.apiKey(c)
	st.keyHash = hash
	if err != nil {
		st.authFailed = isAuthFailure(err)
		return err
	}
	done, err := s.enterInfer(c, key, st)
	if err != nil {
		return err
	}
	defer done(&err)
	freeUpload, err := s.reserveUpload(c.Request())
	if err != nil {
		return err
	}
	defer freeUpload()
	form, err := s.readInferForm(c.Request(), false)
	if err != nil {
		return err
	}
	return s.runInfer(c, st, form)
}

// handleTry serves POST /v1/admin/try: the admin page's "Try it". It runs an
// inference as the key named by api_key_hash (query parameter or form field),
// with that key's scope, status and rate limit, and logs it against that key.
// A revoked key gives 403 here rather than 401, so that the page does not
// take it for an expired admin session.
func (s *Server) handleTry(c echo.Context) (err error) {
	st := inferStateOf(c)
	freeUpload, err := s.reserveUpload(c.Request())
	if err != nil {
		return err
	}
	defer freeUpload()
	form, err := s.readInferForm(c.Request(), true)
	if err != nil {
		return err
	}
	hash := c.QueryParam("api_key_hash")
	if hash == "" {
		hash = form.keyHash
	}
	if hash == "" {
		return badRequest("api_key_hash is required (query parameter or form field)")
	}
	if !isKeyHash(hash) {
		return badRequest("api_key_hash must be 64 lowercase hex characters")
	}
	st.keyHash = hash
	key, err := s.store.GetKey(hash)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "no API key has this api_key_hash")
	}
	if err != nil {
		return err
	}
	if key.Status != store.StatusActive {
		return errorf(CodeForbidden, "the API key is %s; /v1/infer would answer 401", key.Status)
	}
	done, err := s.enterInfer(c, key, st)
	if err != nil {
		return err
	}
	defer done(&err)
	return s.runInfer(c, st, form)
}

// enterInfer takes key's in-flight slot and admits an inference of it
// (budgetInfer). The caller defers done with its named error: done refunds
// the rate-limit token when the request was shed (not for a steered
// request) and frees the slot.
func (s *Server) enterInfer(c echo.Context, key store.APIKey, st *inferState) (done func(*error), err error) {
	release, err := s.enterInflight(key)
	if err != nil {
		return nil, err
	}
	if err := s.admit(c, key, budgetInfer); err != nil {
		release()
		return nil, err
	}
	// The key's end (revoked, or its scope gone) cancels the request.
	right := s.inferRight(c, key.Hash)
	return func(err *error) {
		*err = right(*err)
		if e := rightEndedCause(c.Request().Context()); e != nil && st.try && *err == error(e) && e.Code == CodeUnauthorized {
			// As handleTry answers a revoked key: 401 would read as the
			// end of the admin's own session.
			*err = rightEnded(CodeForbidden, e.Message)
		}
		if !st.steered {
			s.refundIfShed(key.Hash, err)
		}
		release()
	}, nil
}

// answerCandidate is the spec's AnswerCandidate.
type answerCandidate struct {
	Text     string `json:"text"`
	Rank     int    `json:"rank"`
	Length   int    `json:"length"`
	Language string `json:"language"`
}

// timingsMS are the stage timings in whole milliseconds.
type timingsMS struct {
	Decode     int64 `json:"decode"`
	STT        int64 `json:"stt"`
	Prompt     int64 `json:"prompt"`
	Generation int64 `json:"generation"`
	Queue      int64 `json:"queue"`
	Total      int64 `json:"total"`
}

// inferResponse is InferResponse: transcript is present exactly when an audio
// part was sent (possibly ""); candidates, timings_ms and inference_id are
// additive.
type inferResponse struct {
	Transcript *string `json:"transcript,omitempty"`
	// TranscriptLanguage is the language the recording was transcribed in
	// (a Whisper code such as "de"): present when speech-to-text ran.
	// TranscriptWarning, when present, says why it is not the payload's
	// language (an English-only model, a language the model does not know).
	TranscriptLanguage string `json:"transcript_language,omitempty"`
	TranscriptWarning  string `json:"transcript_warning,omitempty"`
	// NoSpeech is present exactly when an audio part was sent: true when
	// the recording held no speech (then transcript is "" and response is
	// empty: the tablet shows "didn't catch that").
	NoSpeech    *bool             `json:"no_speech,omitempty"`
	Response    []string          `json:"response"`
	Candidates  []answerCandidate `json:"candidates"`
	TimingsMS   timingsMS         `json:"timings_ms"`
	InferenceID string            `json:"inference_id"`
	// HistoryTurnsSent is how many messages came before the partner's
	// current turn; HistoryTurnsUsed how many of them, the most recent,
	// went into the prompt (client.md, "How much history is used"). Both
	// are present exactly when the request sent such messages.
	HistoryTurnsSent *int `json:"history_turns_sent,omitempty"`
	HistoryTurnsUsed *int `json:"history_turns_used,omitempty"`
	// SteerMode and SteerExhausted answer a steered request (steer.go).
	SteerMode      string `json:"steer_mode,omitempty"`
	SteerExhausted bool   `json:"steer_exhausted,omitempty"`
}

// runInfer validates the payload against the audio part, runs the inference
// under the configured deadline and answers InferResponse.
//
// An audio part with no message marked audio: true is transcribed into a new
// final speaker message; a marked message without an audio part is a 400.
//
// When the Accept header prefers text/event-stream, the answer is a stream
// of Server-Sent Events: "transcript" ({"transcript"}) as soon as the
// recording is transcribed, a "candidate" for each reply as soon as it is
// complete (rank 1 first, with the inference id), then "candidates" (the
// InferResponse, the same replies in the same order), then the stream ends.
// Errors before the first event are ordinary JSON answers; an error after
// it is an "error" event with the {"error","message"} body, and the record
// holds the replies sent before it. Feedback on a streamed reply before
// the end stops the rest and answers with the replies sent.
func (s *Server) runInfer(c echo.Context, st *inferState, f inferForm) error {
	req, audioIdx, err := parsePayload(f.payload, s.limits)
	if err != nil {
		// A malformed steered request is logged as one (steer.go).
		st.steered = errors.Is(err, errMalformedSteer)
		return err
	}
	if req.UserID != "" {
		if st.subject, req.UserTag, err = s.userSubject(st.keyHash, req.UserID); err != nil {
			return err
		}
	}
	if req.MemoryUser != "" {
		// parsePayload left the user_id there: the memory is the pseudonym's.
		req.MemoryUser = st.subject
	}
	if audioIdx >= 0 && !f.hasAudio {
		return badRequest("messages[%d].audio is true but the request has no audio part", audioIdx)
	}
	var turn string
	if req.Steer != nil {
		if turn, err = s.startSteer(c, st, req, f.hasAudio); err != nil {
			return err
		}
	}
	if f.hasAudio {
		if len(f.audio) == 0 {
			return badRequest("audio: the part is empty")
		}
		st.audio = true
		if audioIdx < 0 {
			req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSpeaker, Audio: true})
		}
		req.Audio = f.audio
		req.AudioContentType = f.audioType
	}
	if err := s.withPrompt(&req); err != nil {
		return err
	}

	// The id names the turn from its start: the replies streamed as they
	// come carry it, and feedback on one of them works at once.
	id, err := newInferenceID(s.rand)
	if err != nil {
		return err
	}
	var events *eventStream
	var queue *eventQueue
	sent := &sentReplies{}
	if wantsEventStream(c.Request().Header.Get(echo.HeaderAccept)) {
		events = &eventStream{c: c}
		// A transcript and at most max_candidates candidates are pushed.
		queue = newEventQueue(s.limits.MaxCandidates + 2)
		defer queue.close() // also when the inference panics
		push := func(event string, v any) {
			queue.push(func() {
				if rightEndedCause(c.Request().Context()) != nil {
					return // the key's end: nothing more is sent
				}
				if err := events.send(event, v); err == nil {
					st.streamed = true
				}
			})
		}
		req.OnTranscript = func(h engine.Heard) { push("transcript", newTranscriptEvent(h)) }
		req.OnCandidate = func(cand engine.Candidate) {
			sent.add(cand)
			push("candidate", newCandidateEvent(id, cand))
		}
	}
	c.Response().Header().Add(echo.HeaderVary, echo.HeaderAccept)

	reqCtx := c.Request().Context()
	ctx, cancel := context.WithTimeout(reqCtx, s.limits.InferTimeout)
	defer cancel()
	// A newer request of this key for the same dialog cancels this one.
	ctx, supersede := context.WithCancelCause(ctx)
	defer supersede(nil)
	defer s.flights.start(st.keyHash, req.DialogID, supersede)()
	ctx = engine.WithRequestID(ctx, c.Response().Header().Get(echo.HeaderXRequestID))
	if events != nil {
		// Feedback on a reply streamed early stops the rest (errChosen)
		// and waits for the record.
		s.recent.begin(id, st.keyHash, s.now(), supersede)
		st.inferenceID = id
	}
	res, err := s.inferer.Infer(ctx, req)
	if queue != nil {
		queue.close() // every event pushed is written: nothing comes after what follows
	}
	st.audioSeconds = res.AudioSeconds
	early := sent.list()
	if err != nil && engine.KindOf(err) == engine.KindCanceled && reqCtx.Err() == nil && errors.Is(context.Cause(ctx), errChosen) {
		// The user took a reply shown early: the answer is the replies
		// sent, the rest were not needed.
		res.Candidates, err = early, nil
	}
	if err != nil {
		if engine.KindOf(err) == engine.KindCanceled && reqCtx.Err() == nil && superseded(ctx) {
			err = &Error{Code: CodeSuperseded, Message: "a newer request for the same dialog_id replaced this one; do not retry it", Err: err}
		} else {
			err = s.inferError(reqCtx, err)
		}
		if len(early) > 0 {
			// Cut short after some replies were shown: the record holds
			// them, and feedback on them works.
			res.Candidates = early
			_, st.inference = newAnswer(id, req, res, s.now().Sub(st.start), turn)
			st.partial, st.candidates = true, len(early)
		}
		if events != nil {
			s.recent.answered(id, candidateTexts(early))
		}
		if events != nil && events.started {
			st.streamed = true
			ae := toAPIError(err)
			_ = events.send("error", errorBody{Error: ae.Code, Message: ae.Message})
		}
		return err
	}
	if st.steered {
		s.metrics.steer.exhausted(req.Steer.Mode, res.SteerExhausted)
	} else {
		s.metrics.observeInference(res)
	}
	if req.MemoryUser != "" {
		log := s.reqLogger(c)
		if res.RecallErr != nil {
			log.Warn("reading the user's remembered replies failed; answered without them", "error", res.RecallErr.Error())
		}
		// Counts only: the examples are the user's words.
		log.Debug("remembered replies in the prompt", "examples", res.Examples, "example_tokens", res.ExampleTokens, "prompt_tokens", res.PromptTokens)
	}

	out, inf := newAnswer(id, req, res, s.now().Sub(st.start), turn)
	st.candidates = len(out.Response)
	st.inference = inf
	// Feedback may arrive before the log entry is written: until it is, it
	// waits for it through recent.
	if events != nil {
		s.recent.answered(id, out.Response)
	} else {
		s.recent.add(id, st.keyHash, s.now(), out.Response)
	}
	if e := rightEndedCause(reqCtx); e != nil {
		// The key ended while the answer was made: not sent.
		if events != nil && events.started {
			st.streamed = true
			_ = events.send("error", errorBody{Error: e.Code, Message: e.Message})
		}
		return e
	}
	return s.sendAnswer(c, events, out)
}

// sendAnswer sends the answer as the candidates event or as JSON.
func (s *Server) sendAnswer(c echo.Context, events *eventStream, out inferResponse) error {
	if events != nil {
		if err := events.send("candidates", out); err != nil {
			// The client went away; the answer was computed.
			s.reqLogger(c).Debug("the candidates event could not be sent", "error", err.Error())
		}
		return nil
	}
	return c.JSON(http.StatusOK, out)
}

// inferError maps an engine failure to the API error. reqCtx is the
// request's own context: when it is done the client went away (499), while
// a passed inference deadline alone is 503 timeout.
func (s *Server) inferError(reqCtx context.Context, err error) error {
	msg := ""
	var ee *engine.Error
	if errors.As(err, &ee) {
		msg = ee.Message
	}
	or := func(def string) string {
		if msg != "" {
			return msg
		}
		return def
	}
	switch engine.KindOf(err) {
	case engine.KindUnsupportedAudio:
		return &Error{Code: CodeUnsupportedMediaType, Message: "audio: " + or("the audio could not be decoded"), Err: err}
	case engine.KindBadAudio:
		return &Error{Code: CodeInvalidRequest, Message: "audio: " + or("the audio part is malformed"), Err: err}
	case engine.KindAudioTooLong:
		return &Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("audio: the recording is longer than the limit of %s", s.limits.MaxAudio), Err: err}
	case engine.KindSTT:
		return &Error{Code: CodeSTTFailed, Message: "audio: speech-to-text failed", Err: err}
	case engine.KindLLM:
		return &Error{Code: CodeLLMFailed, Message: "reply generation failed", Err: err}
	case engine.KindPromptTooLong:
		return &Error{Code: CodePromptTooLong, Message: or("the texts of the request do not fit the language model's context"), Err: err}
	case engine.KindOverloaded:
		return &Error{Code: CodeOverloaded, Message: "the inference queue is full; retry shortly", RetryAfter: s.limits.OverloadedRetryAfter, Err: err}
	case engine.KindNotReady:
		return &Error{Code: CodeNotReady, Message: "models are loading; retry shortly", RetryAfter: s.limits.NotReadyRetryAfter, Err: err}
	case engine.KindLoading:
		retry := s.limits.NotReadyRetryAfter
		if ee != nil && ee.RetryAfter > 0 {
			retry = ee.RetryAfter
		}
		return &Error{Code: CodeLoading, Message: or("a model is being switched; retry shortly"), RetryAfter: retry, Err: err}
	case engine.KindCanceled:
		if e := rightEndedCause(reqCtx); e != nil {
			return e
		}
		if reqCtx.Err() != nil {
			return &Error{Code: CodeCanceled, Message: "the client closed the request", Err: err}
		}
		return &Error{Code: CodeTimeout, Message: fmt.Sprintf("the inference did not finish within %s", s.limits.InferTimeout), RetryAfter: s.limits.OverloadedRetryAfter, Err: err}
	default:
		return &Error{Code: CodeInternal, Message: internalMessage, Err: err}
	}
}

// withPrompt gives req the current system prompt and its version, read
// together once: the record names the prompt the request was made with.
func (s *Server) withPrompt(req *engine.Request) error {
	p, ok, err := s.store.CurrentPrompt()
	if err != nil {
		return err
	}
	req.SystemPrompt, req.PromptVersion = DefaultSystemPrompt, DefaultPromptVersion
	if ok && p.Prompt != "" {
		req.SystemPrompt, req.PromptVersion = p.Prompt, p.Version
	}
	return nil
}

// newAnswer is the answer (InferResponse) to req, which the engine
// answered with res, total after it began, and its inference record, both
// named id: built in one place for /v1/infer and the live turns. The
// transcript fields are present when req had audio; the record holds the
// prompt version req was made with, the replies' lengths and the models,
// for a steered request the turn it refines (steerTurn; its log entry
// makes it findable by id on every box, steer.go), and for remember: true
// the texts to remember (nothing to pair a reply with when the partner
// said nothing).
func newAnswer(id string, req engine.Request, res engine.Result, total time.Duration, steerTurn string) (inferResponse, *store.InferenceInfo) {
	out := newInferResponse(res, total)
	out.InferenceID = id
	if req.Audio != nil || req.PCM != nil {
		t, ns := res.Transcript, res.NoSpeech
		out.Transcript, out.NoSpeech = &t, &ns
		out.TranscriptLanguage, out.TranscriptWarning = res.TranscriptLanguage, res.TranscriptWarning
	}
	inf := &store.InferenceInfo{ID: id, PromptVersion: req.PromptVersion, CandidateChars: make([]int, len(out.Response)),
		Model: res.Model, SpeechModel: res.SpeechModel}
	for i, text := range out.Response {
		inf.CandidateChars[i] = score.Chars(text)
	}
	if req.Steer != nil {
		out.SteerMode, out.SteerExhausted = string(req.Steer.Mode), res.SteerExhausted
		inf.Turn, inf.SteerMode = steerTurn, string(req.Steer.Mode)
	} else if req.MemoryUser != "" && res.PartnerTurn != "" {
		inf.Remember = &store.RememberedTexts{Partner: res.PartnerTurn, Candidates: out.Response}
		inf.UserTag = req.UserTag
	}
	return out, inf
}

// candidateTexts are the texts of cands.
func candidateTexts(cands []engine.Candidate) []string {
	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.Text
	}
	return out
}

// newInferResponse is the part of newAnswer that res alone decides: the
// candidates, timings (total after the request began) and history counts.
func newInferResponse(res engine.Result, total time.Duration) inferResponse {
	out := inferResponse{
		Response:   make([]string, 0, len(res.Candidates)),
		Candidates: make([]answerCandidate, 0, len(res.Candidates)),
		TimingsMS: timingsMS{
			Decode:     res.Timings.Decode.Milliseconds(),
			STT:        res.Timings.STT.Milliseconds(),
			Prompt:     res.Timings.Prompt.Milliseconds(),
			Generation: res.Timings.Generation.Milliseconds(),
			Queue:      res.Timings.Queue.Milliseconds(),
			Total:      total.Milliseconds(),
		},
	}
	if res.HistorySent > 0 {
		sent, used := res.HistorySent, res.HistoryUsed
		out.HistoryTurnsSent, out.HistoryTurnsUsed = &sent, &used
	}
	for i, cand := range res.Candidates {
		rank := cand.Rank
		if rank <= 0 {
			rank = i + 1
		}
		out.Response = append(out.Response, cand.Text)
		out.Candidates = append(out.Candidates, answerCandidate{Text: cand.Text, Rank: rank, Length: cand.Length, Language: cand.Language})
	}
	return out
}
