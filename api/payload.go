package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/language"

	"github.com/replyd/replyd/engine"
)

// wirePayload is the InferPayload JSON. Unknown fields are ignored. Pointer
// fields tell an omitted option from an explicit zero.
type wirePayload struct {
	Messages      []wireMessage `json:"messages"`
	Biography     string        `json:"disabled_person_biography"`
	Language      string        `json:"language"`
	ReplyLanguage string        `json:"reply_language"`
	Persona       string        `json:"persona"`
	UserID        string        `json:"user_id"`
	UserProfile   string        `json:"user_profile"`
	DialogID      string        `json:"dialog_id"`
	StepID        string        `json:"step_id"`
	TimeWindowSec *int64        `json:"time_window_sec"`
	Options       *wireOptions  `json:"options"`
	Remember      bool          `json:"remember"`
	// Steer and ParentInferenceID: a steered request (api/steer.go).
	Steer             json.RawMessage `json:"steer"`
	ParentInferenceID string          `json:"parent_inference_id"`
}

type wireMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Audio   bool   `json:"audio"`
}

type wireOptions struct {
	MaxCandidates *int     `json:"max_candidates"`
	Temperature   *float64 `json:"temperature"`
}

// maxTimeWindowSec bounds time_window_sec (one year).
const maxTimeWindowSec = 366 * 24 * 3600

// parsePayload decodes and validates the payload part of an inference
// request against lim. It returns the engine request without the system
// prompt and audio, and the index of the message marked audio: true (-1 when
// none). Every error is an *Error with code invalid_request whose message
// names the offending field; it never quotes dialog text.
func parsePayload(data []byte, lim Limits) (engine.Request, int, error) {
	var req engine.Request
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 BOM some tools add
	if len(bytes.TrimSpace(data)) == 0 {
		return req, -1, badRequest("payload is empty; it must be a JSON object with messages")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var p wirePayload
	if err := dec.Decode(&p); err != nil {
		return req, -1, jsonError("payload", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, -1, badRequest("payload must hold exactly one JSON object")
	}
	if p.Messages == nil {
		return req, -1, badRequest("messages is required")
	}
	if len(p.Messages) == 0 {
		return req, -1, badRequest("messages must not be empty")
	}
	if len(p.Messages) > lim.MaxMessages {
		return req, -1, badRequest("messages has %d entries; the limit is %d", len(p.Messages), lim.MaxMessages)
	}
	audioIdx := -1
	msgs := make([]engine.Message, len(p.Messages))
	for i, m := range p.Messages {
		switch m.Role {
		case engine.RoleSpeaker, engine.RoleDisabledPerson:
		case "":
			return req, -1, badRequest("messages[%d].role is required (speaker or disabled_person)", i)
		default:
			return req, -1, badRequest("messages[%d].role must be \"speaker\" or \"disabled_person\"", i)
		}
		if n := utf8.RuneCountInString(m.Content); n > lim.MaxContentChars {
			return req, -1, badRequest("messages[%d].content has %d characters; the limit is %d", i, n, lim.MaxContentChars)
		}
		if m.Audio {
			if m.Role != engine.RoleSpeaker {
				return req, -1, badRequest("messages[%d].audio may be true only on a speaker message", i)
			}
			if audioIdx >= 0 {
				return req, -1, badRequest("messages[%d].audio: at most one message may have audio: true (messages[%d] already has)", i, audioIdx)
			}
			audioIdx = i
		}
		msgs[i] = engine.Message{Role: m.Role, Content: m.Content, Audio: m.Audio}
	}
	for _, f := range []struct {
		name, val string
		max       int
	}{
		{"disabled_person_biography", p.Biography, lim.MaxProfileChars},
		{"persona", p.Persona, lim.MaxProfileChars},
		{"user_profile", p.UserProfile, lim.MaxProfileChars},
		{"language", p.Language, lim.MaxIDChars},
		{"reply_language", p.ReplyLanguage, lim.MaxIDChars},
		{"user_id", p.UserID, lim.MaxIDChars},
		{"dialog_id", p.DialogID, lim.MaxIDChars},
		{"step_id", p.StepID, lim.MaxIDChars},
	} {
		if n := utf8.RuneCountInString(f.val); n > f.max {
			return req, -1, badRequest("%s has %d characters; the limit is %d", f.name, n, f.max)
		}
	}
	lang, err := parseLanguage("language", p.Language)
	if err != nil {
		return req, -1, err
	}
	replyLang, err := parseLanguage("reply_language", p.ReplyLanguage)
	if err != nil {
		return req, -1, err
	}
	if replyLang == "auto" {
		replyLang = "" // follow language, else the transcript's
	}
	if p.Remember && strings.TrimSpace(p.UserID) == "" {
		return req, -1, badRequest("remember requires user_id: replies are remembered per user")
	}
	if p.TimeWindowSec != nil && (*p.TimeWindowSec < 0 || *p.TimeWindowSec > maxTimeWindowSec) {
		return req, -1, badRequest("time_window_sec must be between 0 and %d", maxTimeWindowSec)
	}
	req.MaxCandidates = lim.DefaultCandidates
	req.Temperature = lim.DefaultTemperature
	if o := p.Options; o != nil {
		if o.MaxCandidates != nil {
			if *o.MaxCandidates < 1 || *o.MaxCandidates > lim.MaxCandidates {
				return req, -1, badRequest("options.max_candidates must be between 1 and %d", lim.MaxCandidates)
			}
			req.MaxCandidates = *o.MaxCandidates
		}
		if o.Temperature != nil {
			if !(*o.Temperature >= 0 && *o.Temperature <= lim.MaxTemperature) {
				return req, -1, badRequest("options.temperature must be between 0 and %g", lim.MaxTemperature)
			}
			req.Temperature = *o.Temperature
		}
	}
	req.Messages = msgs
	req.Profile = engine.Profile{
		Biography:     p.Biography,
		Persona:       p.Persona,
		UserProfile:   p.UserProfile,
		Language:      lang,
		ReplyLanguage: replyLang,
	}
	req.UserID = p.UserID
	if p.Remember {
		// The caller replaces it with the user's pseudonym (Server.pseudonym).
		req.MemoryUser = p.UserID
	}
	req.DialogID = p.DialogID
	req.StepID = p.StepID
	if p.TimeWindowSec != nil {
		req.TimeWindowSec = int(*p.TimeWindowSec)
	}
	if err := parseSteer(p.Steer, p.ParentInferenceID, &req); err != nil {
		return req, -1, err
	}
	return req, audioIdx, nil
}

// parseLanguage checks the payload's language field called name (language
// or reply_language): empty or "auto" (detect it, or follow), or a
// well-formed BCP 47 tag whose subtags are registered ("en", "pt-BR",
// "zh-Hant"), returned in canonical form. Anything else (a misspelt or
// unknown code such as "xx" or "german") is a 400 that never quotes the
// value: the value is free text from the network and is never logged
// either.
func parseLanguage(name, v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "auto" {
		return v, nil
	}
	tag, err := language.Parse(v)
	if err != nil {
		return "", badRequest("%s must be a BCP 47 language tag such as en, de or pt-BR (or auto)", name)
	}
	return tag.String(), nil
}

// jsonError turns a decoding error of the JSON document called what into a
// 400 whose message names the field and never quotes the document.
func jsonError(what string, err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se) && strings.Contains(se.Error(), "unexpected end"):
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s is not valid JSON (unexpected end)", what), Err: err}
	case errors.As(err, &se):
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s is not valid JSON (syntax error at byte %d)", what, se.Offset), Err: err}
	case errors.As(err, &te):
		// te.Field is the dotted path encoding/json reports, such as
		// "options.max_candidates" or "messages.role".
		field := te.Field
		if field == "" {
			return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s must be a JSON object", what), Err: err}
		}
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s has the wrong type: expected %s", field, jsonTypeName(te.Type.Kind().String())), Err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s is not valid JSON (unexpected end)", what), Err: err}
	default:
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("%s is not valid JSON", what), Err: err}
	}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint32":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "ptr", "map":
		return "an object"
	}
	return kind
}

// ParseDialog validates one dialog of `replyd eval`: an InferPayload (its
// messages, the profile fields and options) under the limits lim, with
// the same messages as /v1/infer. It refuses audio: eval replays text.
// Its error is an *Error whose Message names the field.
func ParseDialog(data []byte, lim Limits) (engine.Request, error) {
	req, audioIdx, err := parsePayload(data, lim.withDefaults())
	if err != nil {
		return req, err
	}
	if audioIdx >= 0 {
		return req, badRequest("messages[%d].audio: replyd eval replays text only; put the transcript in content", audioIdx)
	}
	req.MemoryUser = "" // eval has no memory
	return req, nil
}
