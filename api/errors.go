package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// Error codes sent in the "error" field of every error body. Each code has
// exactly one HTTP status, given by codeStatus.
const (
	CodeInvalidRequest       = "invalid_request"
	CodePromptTooLong        = "prompt_too_long"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeConflict             = "conflict"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeRateLimited          = "rate_limited"
	CodeCanceled             = "canceled"
	CodeInternal             = "internal"
	CodeSTTFailed            = "stt_failed"
	CodeLLMFailed            = "llm_failed"
	CodeOTPDeliveryFailed    = "otp_delivery_failed"
	CodeOverloaded           = "overloaded"
	CodeNotReady             = "not_ready"
	CodeTimeout              = "timeout"
	CodeInsufficientStorage  = "insufficient_storage"
	CodeRequestTimeout       = "request_timeout"
	CodeStoreUnavailable     = "store_unavailable"
	CodeNotSupported         = "not_supported"
	// CodeSuperseded: a newer request of the same key for the same
	// dialog_id arrived while this one ran; not retryable.
	CodeSuperseded = "superseded"
	// CodeInvalidModel: an uploaded model file failed its check (the
	// message says what is wrong); 422.
	CodeInvalidModel = "invalid_model"
	// CodeLoading: the model the request needs is being switched and could
	// not stay loaded meanwhile; 503 with Retry-After.
	CodeLoading = "loading"
	// CodeModelUnavailable: a model the request needs failed to load and
	// none is loading (engine.KindModelUnavailable); 503 without
	// Retry-After: an administrator must activate a working model.
	CodeModelUnavailable = "model_unavailable"
)

// storeRetryAfter is the Retry-After sent with store_unavailable: about the
// time PostgreSQL takes to restart or fail over.
const storeRetryAfter = 5 * time.Second

// StatusClientClosedRequest is the status logged (and, if the connection is
// somehow still open, sent) when the client went away before the answer was
// ready. It follows nginx's convention; no client ever reads it.
const StatusClientClosedRequest = 499

// codeStatus is the one table from error code to HTTP status.
var codeStatus = map[string]int{
	CodeInvalidRequest:       http.StatusBadRequest,
	CodePromptTooLong:        http.StatusBadRequest,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeForbidden:            http.StatusForbidden,
	CodeNotFound:             http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeConflict:             http.StatusConflict,
	CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeRateLimited:          http.StatusTooManyRequests,
	CodeCanceled:             StatusClientClosedRequest,
	CodeInternal:             http.StatusInternalServerError,
	CodeSTTFailed:            http.StatusBadGateway,
	CodeLLMFailed:            http.StatusBadGateway,
	CodeOTPDeliveryFailed:    http.StatusBadGateway,
	CodeOverloaded:           http.StatusServiceUnavailable,
	CodeNotReady:             http.StatusServiceUnavailable,
	CodeTimeout:              http.StatusServiceUnavailable,
	CodeInsufficientStorage:  http.StatusInsufficientStorage,
	CodeRequestTimeout:       http.StatusRequestTimeout,
	CodeStoreUnavailable:     http.StatusServiceUnavailable,
	CodeNotSupported:         http.StatusNotImplemented,
	CodeSuperseded:           http.StatusConflict,
	CodeInvalidModel:         http.StatusUnprocessableEntity,
	CodeLoading:              http.StatusServiceUnavailable,
	CodeModelUnavailable:     http.StatusServiceUnavailable,
}

// internalMessage is the only text a client ever sees for an unexpected error.
const internalMessage = "Internal error."

// insufficientStorageMessage answers a write that failed for lack of space.
const insufficientStorageMessage = "the appliance's data disk is full, so the change was not saved; free space on it (the admin page's Status view shows how much is left) and retry"

// Error is the typed error every handler returns. The HTTPErrorHandler sends
// it as {"error": Code, "message": Message} with the status codeStatus gives
// Code. Message is shown to the client, so it must never contain dialog text,
// transcripts or secrets; Err is the cause, logged only.
type Error struct {
	Code    string
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header in whole
	// seconds (rounded up).
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Status returns the HTTP status of e's code; unknown codes are 500.
func (e *Error) Status() int {
	if st, ok := codeStatus[e.Code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// errorf returns an *Error with a formatted message.
func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// badRequest returns a 400 invalid_request error.
func badRequest(format string, args ...any) *Error {
	return errorf(CodeInvalidRequest, format, args...)
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// toAPIError classifies any error returned by a handler or middleware as an
// *Error. It never copies the text of an unknown error into Message.
func toAPIError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, store.ErrUnavailable) {
		return &Error{Code: CodeStoreUnavailable, Message: "the database is unreachable; retry shortly", RetryAfter: storeRetryAfter, Err: err}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(CodePayloadTooLarge, "the request body exceeds the limit of %s", formatBytes(mbe.Limit))
	}
	if me := modelError(err); me != nil {
		return me
	}
	if errors.Is(err, store.ErrNoSpace) {
		return &Error{Code: CodeInsufficientStorage, Message: insufficientStorageMessage, Err: err}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return &Error{Code: CodeNotFound, Message: "no such route", Err: err}
		case http.StatusMethodNotAllowed:
			return &Error{Code: CodeMethodNotAllowed, Message: "this method is not allowed on this route", Err: err}
		case http.StatusRequestEntityTooLarge:
			return &Error{Code: CodePayloadTooLarge, Message: "the request body is too large", Err: err}
		case http.StatusUnsupportedMediaType:
			return &Error{Code: CodeUnsupportedMediaType, Message: "unsupported Content-Type", Err: err}
		case http.StatusUnauthorized:
			return &Error{Code: CodeUnauthorized, Message: "missing or invalid credentials", Err: err}
		case http.StatusForbidden:
			return &Error{Code: CodeForbidden, Message: "forbidden", Err: err}
		case http.StatusTooManyRequests:
			return &Error{Code: CodeRateLimited, Message: "too many requests", Err: err}
		case http.StatusServiceUnavailable:
			return &Error{Code: CodeOverloaded, Message: "the service is unavailable; retry shortly", Err: err}
		}
		if he.Code >= 400 && he.Code < 500 {
			return &Error{Code: CodeInvalidRequest, Message: "the request is malformed", Err: err}
		}
	}
	return &Error{Code: CodeInternal, Message: internalMessage, Err: err}
}

// handleError is the server's one Echo HTTPErrorHandler: it turns any error
// into the {"error","message"} body. When the response is already committed
// it only logs. Unknown errors become 500 internal with a fixed message and
// the real error goes to the log.
func (s *Server) handleError(err error, c echo.Context) {
	ae := toAPIError(err)
	status := ae.Status()
	log := s.reqLogger(c)
	if c.Response().Committed {
		log.Warn("error after the response was committed", "error", err.Error())
		return
	}
	if status == http.StatusServiceUnavailable && ae.RetryAfter > 0 {
		// Load shedding (overloaded, still loading) is the service working
		// as designed, not a fault: warn, so a busy hour does not flood the
		// error log.
		log.Warn("request shed", "code", ae.Code, "error", err.Error())
	} else if status >= 500 && status != StatusClientClosedRequest {
		log.Error("request failed", "code", ae.Code, "error", err.Error())
	} else if ae.Err != nil {
		// Causes of 4xx errors are client mistakes; keep them out of info.
		log.Debug("request rejected", "code", ae.Code, "error", ae.Err.Error())
	}
	// A handler may have set headers for the answer it meant to give.
	c.Response().Header().Del(echo.HeaderContentType)
	c.Response().Header().Del(echo.HeaderContentDisposition)
	if ae.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(ae.RetryAfter), 10))
	}
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = c.JSON(status, errorBody{Error: ae.Code, Message: ae.Message})
	}
	if err != nil {
		log.Warn("writing the error response failed", "error", err.Error())
	}
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
