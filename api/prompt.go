package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// DefaultSystemPrompt is the system prompt replyd ships with. cmd seeds the
// store with it on first start; the API also uses it when the store holds
// none. It asks for what an AAC user needs from a suggestion: something they
// can say as it is, in their own voice, quickly.
const DefaultSystemPrompt = `You suggest replies for a person who communicates with an AAC (augmentative and alternative communication) device. The dialog is between a conversation partner ("speaker") and this person ("disabled_person"). Write the next thing the disabled_person could say to the speaker.

Rules:
- Write in the first person, as the disabled_person, in their own voice. Use their biography, persona and profile when given: their words, their tone, their opinions.
- Keep each reply short: one sentence, at most about 15 words, easy to say aloud as it is.
- Answer what the speaker just said. If it was a question, answer it directly.
- Never give advice, explain, lecture or speak about the person in the third person. Do not add greetings, emojis, quotation marks or commentary.
- Make the candidates clearly different from each other: for example agree, decline, ask back, or share a feeling.
- If the speaker's words are unclear or missing, offer short replies that ask them to repeat or clarify.
- Reply in the language of the dialog unless a language is given.`

// promptObject is the system prompt object; created_at is additive.
type promptObject struct {
	Prompt    string     `json:"prompt"`
	Version   string     `json:"version"`
	CreatedAt *time.Time `json:"created_at"`
}

// DefaultPromptVersion is DefaultSystemPrompt's version: replyd saves the
// built-in prompt as this version on first start (SeedDefaultPrompt), so the
// versions an administrator saves come after it.
const DefaultPromptVersion = "1"

// SeedDefaultPrompt saves DefaultSystemPrompt as DefaultPromptVersion when
// st holds no system prompt yet, and reports whether it did. cmd calls it at
// start; saving a prompt into an empty store calls it first too, so that the
// history always begins with the built-in prompt.
func SeedDefaultPrompt(st Store, now time.Time) (bool, error) {
	if _, ok, err := st.CurrentPrompt(); err != nil || ok {
		return false, err
	}
	err := st.SavePrompt(store.PromptVersion{Prompt: DefaultSystemPrompt, Version: DefaultPromptVersion, CreatedAt: now.UTC()})
	if errors.Is(err, store.ErrExists) {
		return false, nil // a concurrent save seeded it
	}
	return err == nil, err
}

// maxVersionChars bounds a prompt version string.
const maxVersionChars = 64

// handleGetPrompt serves GET /v1/admin/system-prompt.
func (s *Server) handleGetPrompt(c echo.Context) error {
	p, ok, err := s.store.CurrentPrompt()
	if err != nil {
		return err
	}
	if !ok {
		return c.JSON(http.StatusOK, promptObject{Prompt: DefaultSystemPrompt, Version: DefaultPromptVersion})
	}
	return c.JSON(http.StatusOK, promptObject{Prompt: p.Prompt, Version: p.Version, CreatedAt: optTime(p.CreatedAt)})
}

type promptSetRequest struct {
	Prompt  *string         `json:"prompt"`
	Version json.RawMessage `json:"version"`
}

// handleSetPrompt serves POST /v1/admin/system-prompt: it stores a new
// version (the body's version, a string or integer, or the next integer when
// omitted) and keeps the earlier ones. An empty prompt is 400; a version
// already used is 409 conflict.
func (s *Server) handleSetPrompt(c echo.Context) error {
	var req promptSetRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	if req.Prompt == nil || strings.TrimSpace(*req.Prompt) == "" {
		return badRequest("prompt is required and must not be empty")
	}
	if n := utf8.RuneCountInString(*req.Prompt); n > s.limits.MaxPromptChars {
		return badRequest("prompt has %d characters; the limit is %d", n, s.limits.MaxPromptChars)
	}
	version, err := parseVersion(req.Version)
	if err != nil {
		return err
	}
	if _, err := SeedDefaultPrompt(s.store, s.now()); err != nil {
		return err
	}
	if version == "" {
		if version, err = s.store.NextPromptVersion(); err != nil {
			return err
		}
	}
	p := store.PromptVersion{Prompt: *req.Prompt, Version: version, CreatedAt: s.now().UTC()}
	if err := s.store.SavePrompt(p); err != nil {
		if errors.Is(err, store.ErrExists) {
			return errorf(CodeConflict, "version %q already exists; omit version to take the next one", version)
		}
		return err
	}
	s.adminLog(c, store.LevelInfo, "system-prompt:"+version, "system prompt changed to version %s", version)
	return c.JSON(http.StatusOK, promptObject{Prompt: p.Prompt, Version: p.Version, CreatedAt: optTime(p.CreatedAt)})
}

// parseVersion accepts a JSON string or integer version; absent or null is "".
func parseVersion(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var v string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", badRequest("version must be a string or an integer")
		}
	} else {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return "", badRequest("version must be a string or an integer")
		}
		v = strconv.FormatInt(n, 10)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", badRequest("version must not be empty; omit it to take the next integer")
	}
	if utf8.RuneCountInString(v) > maxVersionChars {
		return "", badRequest("version is longer than %d characters", maxVersionChars)
	}
	return v, nil
}

// handlePromptHistory serves GET /v1/admin/system-prompt/history, newest first.
func (s *Server) handlePromptHistory(c echo.Context) error {
	limit, err := s.listLimit(c)
	if err != nil {
		return err
	}
	ps, err := s.store.PromptHistory(limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(ps, func(p store.PromptVersion) promptObject {
		return promptObject{Prompt: p.Prompt, Version: p.Version, CreatedAt: optTime(p.CreatedAt)}
	}))
}
