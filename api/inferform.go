package api

// Reading the multipart body of /v1/infer and /v1/admin/try.

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"

	"github.com/labstack/echo/v4"
)

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

// multipartError classifies a failure while reading the multipart body. Our
// own readers' errors (a body cut for arriving too slowly, the upload budget
// spent) pass through.
func multipartError(err error) error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the request body exceeds the limit of %s", formatBytes(mbe.Limit)), Err: err}
	}
	return &Error{Code: CodeInvalidRequest, Message: "the multipart body is malformed or truncated", Err: err}
}
