package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Header names of the credentials.
const (
	HeaderAPIKey       = "X-API-KEY"
	HeaderAdminKey     = "X-ADMIN-KEY"
	HeaderAdminSession = "X-ADMIN-SESSION"
)

// ScopeInfer is the scope an API key needs to call /v1/infer. It is the only
// scope replyd defines.
const ScopeInfer = "infer"

// knownScopes are the scopes a key may be created with.
var knownScopes = []string{ScopeInfer}

// maxSecretHeader bounds a credential header; longer values are invalid
// without being hashed.
const maxSecretHeader = 512

// hashHex returns the lowercase hex SHA-256 of s: how keys, codes and
// session tokens are stored and how api_key_hash is formed.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// inferState carries what the infer log line needs from the handler to the
// inferLog middleware. It never holds dialog text.
type inferState struct {
	start        time.Time
	try          bool
	keyHash      string
	subject      string
	audio        bool
	audioSeconds float64
	candidates   int
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
// appends exactly one log entry for the call, whatever its outcome: level
// info on 2xx, warn on 4xx, error on 5xx. The entry names counts and times,
// never dialog text or transcripts.
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
		entry := store.LogEntry{
			Timestamp:    s.now(),
			Level:        level,
			Message:      msg,
			ResourceType: store.ResourceAPIKey,
			ResourceID:   st.keyHash,
			StreamName:   store.StreamInfer,
			Subject:      subject,
			Status:       status,
			LatencyMS:    elapsed.Milliseconds(),
		}
		if err := s.store.AppendLog(entry); err != nil {
			s.reqLogger(c).Error("appending the infer log entry failed", "error", err.Error())
		}
		s.metrics.inferences.WithLabelValues(code).Inc()
		return nil
	}
}

// handleInfer serves POST /v1/infer: authenticate the key, apply its rate
// limit, and only then read and decode the body.
func (s *Server) handleInfer(c echo.Context) error {
	st := inferStateOf(c)
	raw := c.Request().Header.Get(HeaderAPIKey)
	if raw == "" {
		return errorf(CodeUnauthorized, "the %s header is required", HeaderAPIKey)
	}
	if len(raw) > maxSecretHeader {
		return errorf(CodeUnauthorized, "%s is not a valid API key", HeaderAPIKey)
	}
	st.keyHash = hashHex(raw)
	key, err := s.store.GetKey(st.keyHash)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeUnauthorized, "%s is not a valid API key", HeaderAPIKey)
	}
	if err != nil {
		return err
	}
	if key.Status != store.StatusActive {
		return errorf(CodeUnauthorized, "%s has been revoked", HeaderAPIKey)
	}
	if err := s.admit(c, key); err != nil {
		return err
	}
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
func (s *Server) handleTry(c echo.Context) error {
	st := inferStateOf(c)
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
	if err := s.admit(c, key); err != nil {
		return err
	}
	return s.runInfer(c, st, form)
}

// admit checks the key's scope and rate limit, and records its use (at most
// once a minute per key).
func (s *Server) admit(c echo.Context, key store.APIKey) error {
	if !slices.Contains(key.Scopes, ScopeInfer) {
		return errorf(CodeForbidden, "this API key lacks the scope %q", ScopeInfer)
	}
	now := s.now()
	if ok, retry := s.limiter.allow(key.Hash, key.RateLimitPerMinute, now); !ok {
		s.metrics.rateLimited.Inc()
		return &Error{
			Code:       CodeRateLimited,
			Message:    fmt.Sprintf("rate limit of %d requests per minute exceeded for this API key; retry in %d s", key.RateLimitPerMinute, retryAfterSeconds(retry)),
			RetryAfter: retry,
		}
	}
	if s.limiter.shouldTouch(key.Hash, now) {
		if err := s.store.TouchKey(key.Hash, now); err != nil {
			s.reqLogger(c).Warn("recording the key's last use failed", "error", err.Error())
		}
	}
	return nil
}

// inferForm is the raw content of an inference multipart body.
type inferForm struct {
	payload    []byte
	hasPayload bool
	audio      []byte
	hasAudio   bool
	audioType  string
	keyHash    string
}

// maxKeyHashField bounds the api_key_hash form field.
const maxKeyHashField = 256

// readInferForm reads the multipart body: the payload part (file part or
// plain field, any or no content type), the optional audio part and, for
// /v1/admin/try, the api_key_hash field. Other parts are read and ignored.
func (s *Server) readInferForm(r *http.Request, withKeyHash bool) (inferForm, error) {
	var f inferForm
	mt, params, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	if err != nil || mt != "multipart/form-data" {
		return f, errorf(CodeUnsupportedMediaType, "Content-Type must be multipart/form-data with a payload part")
	}
	if params["boundary"] == "" {
		return f, badRequest("Content-Type multipart/form-data needs a boundary parameter")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return f, multipartError(err)
		}
		switch name := part.FormName(); {
		case name == "payload":
			if f.hasPayload {
				return f, badRequest("payload: the part was sent twice")
			}
			data, err := readAtMost(part, s.limits.MaxPayloadBytes)
			if err != nil {
				return f, partError("payload", err, s.limits.MaxPayloadBytes)
			}
			f.payload, f.hasPayload = data, true
		case name == "audio":
			if f.hasAudio {
				return f, badRequest("audio: only one audio part is allowed")
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return f, multipartError(err)
			}
			f.audio, f.hasAudio = data, true
			f.audioType = part.Header.Get(echo.HeaderContentType)
		case name == "api_key_hash" && withKeyHash:
			data, err := readAtMost(part, maxKeyHashField)
			if err != nil {
				return f, partError("api_key_hash", err, maxKeyHashField)
			}
			f.keyHash = string(data)
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return f, multipartError(err)
			}
		}
	}
	if !f.hasPayload {
		return f, badRequest("payload: the multipart part is required")
	}
	return f, nil
}

var errPartTooLarge = errors.New("part too large")

// readAtMost reads all of r, failing with errPartTooLarge past max bytes.
func readAtMost(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, errPartTooLarge
	}
	return data, nil
}

func partError(name string, err error, max int64) error {
	if errors.Is(err, errPartTooLarge) {
		return errorf(CodePayloadTooLarge, "%s: the part exceeds the limit of %s", name, formatBytes(max))
	}
	return multipartError(err)
}

// multipartError classifies a failure while reading the multipart body.
func multipartError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the request body exceeds the limit of %s", formatBytes(mbe.Limit)), Err: err}
	}
	return &Error{Code: CodeInvalidRequest, Message: "the multipart body is malformed or truncated", Err: err}
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
// part was sent (possibly ""); candidates and timings_ms are additive.
type inferResponse struct {
	Transcript *string           `json:"transcript,omitempty"`
	Response   []string          `json:"response"`
	Candidates []answerCandidate `json:"candidates"`
	TimingsMS  timingsMS         `json:"timings_ms"`
}

// runInfer validates the payload against the audio part, runs the inference
// under the configured deadline and answers InferResponse.
//
// An audio part with no message marked audio: true is transcribed into a new
// final speaker message; a marked message without an audio part is a 400.
func (s *Server) runInfer(c echo.Context, st *inferState, f inferForm) error {
	req, audioIdx, err := parsePayload(f.payload, s.limits)
	if err != nil {
		return err
	}
	if req.UserID != "" {
		st.subject = hashHex(req.UserID)
	}
	if audioIdx >= 0 && !f.hasAudio {
		return badRequest("messages[%d].audio is true but the request has no audio part", audioIdx)
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
	p, ok, err := s.store.CurrentPrompt()
	if err != nil {
		return err
	}
	req.SystemPrompt = DefaultSystemPrompt
	if ok && p.Prompt != "" {
		req.SystemPrompt = p.Prompt
	}

	reqCtx := c.Request().Context()
	ctx, cancel := context.WithTimeout(reqCtx, s.limits.InferTimeout)
	defer cancel()
	res, err := s.inferer.Infer(ctx, req)
	st.audioSeconds = res.AudioSeconds
	if err != nil {
		return s.inferError(reqCtx, err)
	}
	s.metrics.observeInference(res)

	out := inferResponse{
		Response:   make([]string, 0, len(res.Candidates)),
		Candidates: make([]answerCandidate, 0, len(res.Candidates)),
		TimingsMS: timingsMS{
			Decode:     res.Timings.Decode.Milliseconds(),
			STT:        res.Timings.STT.Milliseconds(),
			Prompt:     res.Timings.Prompt.Milliseconds(),
			Generation: res.Timings.Generation.Milliseconds(),
			Queue:      res.Timings.Queue.Milliseconds(),
			Total:      s.now().Sub(st.start).Milliseconds(),
		},
	}
	for i, cand := range res.Candidates {
		rank := cand.Rank
		if rank <= 0 {
			rank = i + 1
		}
		lang := cand.Language
		if lang == "" {
			lang = req.Profile.Language
		}
		out.Response = append(out.Response, cand.Text)
		out.Candidates = append(out.Candidates, answerCandidate{Text: cand.Text, Rank: rank, Length: cand.Length, Language: lang})
	}
	if f.hasAudio {
		t := res.Transcript
		out.Transcript = &t
	}
	st.candidates = len(out.Response)
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
	case engine.KindOverloaded:
		return &Error{Code: CodeOverloaded, Message: "the inference queue is full; retry shortly", RetryAfter: s.limits.OverloadedRetryAfter, Err: err}
	case engine.KindNotReady:
		return &Error{Code: CodeNotReady, Message: "models are loading; retry shortly", RetryAfter: s.limits.NotReadyRetryAfter, Err: err}
	case engine.KindCanceled:
		if reqCtx.Err() != nil {
			return &Error{Code: CodeCanceled, Message: "the client closed the request", Err: err}
		}
		return &Error{Code: CodeTimeout, Message: fmt.Sprintf("the inference did not finish within %s", s.limits.InferTimeout), RetryAfter: s.limits.OverloadedRetryAfter, Err: err}
	default:
		return &Error{Code: CodeInternal, Message: internalMessage, Err: err}
	}
}

// isKeyHash reports whether h looks like an api_key_hash.
func isKeyHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
