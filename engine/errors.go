package engine

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies a pipeline failure so the API can map it to a status.
type Kind int

// Kinds of pipeline failure.
const (
	KindInternal         Kind = iota
	KindUnsupportedAudio      // 415 unsupported_media_type
	KindBadAudio              // 400 invalid_request: the audio part is malformed or empty
	KindAudioTooLong          // 413 payload_too_large
	KindSTT                   // 502 stt_failed
	KindLLM                   // 502 llm_failed
	KindOverloaded            // 503 overloaded
	KindNotReady              // 503 not_ready: models still loading or failed to load
	KindCanceled              // the client went away or the deadline passed
	// KindPromptTooLong: the request's own texts (with the system prompt)
	// do not fit the model's context even after dropping every older turn:
	// 400 prompt_too_long. The message names the fields and their sizes in
	// tokens, never their text. Retrying the same request fails again.
	KindPromptTooLong
	// KindLoading: the model a request needs is being switched and the old
	// one is already unloaded (both did not fit in memory at once): 503
	// loading, with Error.RetryAfter when the engine can tell how long the
	// load takes. Retrying after that time succeeds.
	KindLoading
	// KindModelUnavailable: the engine has no model and none is loading:
	// its model failed to load, at start or when a failed switch could not
	// reload the old one. 503 model_unavailable, without Retry-After:
	// retrying changes nothing until an administrator activates a model
	// that loads.
	KindModelUnavailable
)

// Error is the typed error the pipeline and the engines return.
type Error struct {
	Kind    Kind
	Message string // safe to show to the client: never dialog text
	Err     error  // the cause, for logs only
	// RetryAfter, when positive, is how long the engine expects the
	// condition to last (KindLoading: the new model's load time).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of the given kind.
func Errorf(kind Kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: cause}
}

// ErrOverloaded refuses a request at once, before any of its work: a stage
// of the Scheduler holds its most requests, or the request's expected wait
// is longer than its deadline or than the Workload bound allows. Retrying
// after a short while may succeed.
var ErrOverloaded = &Error{Kind: KindOverloaded, Message: "the inference queue is full; retry shortly"}

// KindOf returns the Kind of err: the Kind of the first *Error in its chain,
// KindCanceled for context errors, KindInternal otherwise.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if isContextErr(err) {
		return KindCanceled
	}
	return KindInternal
}
