package api

// POST /v1/feedback: what the AAC user did with an inference's candidates.

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/store"
)

// newInferenceID returns "inf_" and 22 base64url characters: 128 random bits.
func newInferenceID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", err
	}
	return "inf_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

var inferenceIDPattern = regexp.MustCompile(`^inf_[A-Za-z0-9_-]{22}$`)

// maxTimeToChoice bounds time_to_choice_ms: the feedback window.
const maxTimeToChoice = int64(store.FeedbackWindow / time.Millisecond)

// feedbackRequest is the body of POST /v1/feedback. Pointers tell an
// omitted field from a zero one.
type feedbackRequest struct {
	InferenceID    *string `json:"inference_id"`
	ChosenRank     *int    `json:"chosen_rank"`
	SpokenText     *string `json:"spoken_text"`
	NoneFit        *bool   `json:"none_fit"`
	TimeToChoiceMS *int64  `json:"time_to_choice_ms"`
	// KeysPressed and Selections: the user's actions for this turn on
	// the conversation page (steer.go: keystroke saving rate).
	KeysPressed *int `json:"keys_pressed"`
	Selections  *int `json:"selections"`
}

// feedbackResponse says how the outcome was recorded.
type feedbackResponse struct {
	InferenceID     string `json:"inference_id"`
	Outcome         string `json:"outcome"`
	KeystrokesSaved int    `json:"keystrokes_saved"`
	Replaced        bool   `json:"replaced"`
	Remembered      bool   `json:"remembered"`
}

// errNoInference is the one answer for an id that is unknown, past the
// feedback window or another key's: it must not reveal which.
func errNoInference() *Error {
	return errorf(CodeNotFound, "no inference with this inference_id is open for feedback from this API key (unknown, older than 24 h, or made with another key)")
}

// handleFeedback serves POST /v1/feedback. The key must be the one that made
// the inference (another key's id is 404, like an unknown one), with scope
// infer; reports have their own per-key budget of rate_limit_per_minute. An
// outcome may be reported for store.FeedbackWindow after the inference; a
// second report within store.ReplaceWindow of the first replaces it, a
// later one is 409. spoken_text is kept, encrypted, only for a user with
// remember: true; otherwise only the rank, lengths and times are.
func (s *Server) handleFeedback(c echo.Context) error {
	key, _, err := s.apiKey(c)
	if err != nil {
		return err
	}
	if err := s.admit(c, key, budgetFeedback); err != nil {
		return err
	}
	var req feedbackRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	if err := s.validateFeedback(&req); err != nil {
		return err
	}
	id := *req.InferenceID
	now := s.now()
	// A reply shown before the others were complete: they are not needed.
	s.recent.choose(id, key.Hash)
	recent, err := s.recent.get(c.Request().Context(), id, now)
	if err != nil {
		return &Error{Code: CodeCanceled, Message: "the client closed the request", Err: err}
	}
	inf, err := s.openInference(key.Hash, id, now)
	if err != nil {
		return err
	}
	// A steered answer's outcome is its turn's.
	steered := steeredAnswer(inf)
	if steered != nil {
		id = inf.Turn
		if inf, err = s.openInference(key.Hash, id, now); err != nil {
			return err
		}
		inf.CandidateChars = steered.chars
	}
	n := len(inf.CandidateChars)
	if req.ChosenRank != nil && *req.ChosenRank > n {
		return badRequest("chosen_rank is %d but the inference returned %d candidates", *req.ChosenRank, n)
	}
	o := store.Outcome{TimeToChoiceMS: -1, FirstAt: now, At: now}
	if req.TimeToChoiceMS != nil {
		o.TimeToChoiceMS = *req.TimeToChoiceMS
	}
	replaced := inf.Outcome != nil
	if replaced {
		if now.Sub(inf.Outcome.FirstAt) > store.ReplaceWindow {
			return errorf(CodeConflict, "an outcome was reported for this inference more than %d minutes ago; it can no longer be changed", int(store.ReplaceWindow/time.Minute))
		}
		o.FirstAt = inf.Outcome.FirstAt
	}
	// The candidate texts: from memory (this process answered it), else
	// from the store (only for users with remember: true).
	var cands []string
	if recent != nil {
		cands = recent.candidates
	} else if inf.Texts != nil && steered == nil {
		cands = inf.Texts.Candidates
	}
	spoken := ""
	if req.SpokenText != nil {
		spoken = strings.TrimSpace(*req.SpokenText)
	}
	reply := spoken
	switch {
	case req.NoneFit != nil && *req.NoneFit:
		o.Kind, o.SpokenChars = store.OutcomeNoneFit, score.Chars(spoken)
	case req.ChosenRank != nil:
		o.Rank = *req.ChosenRank
		cand := ""
		if o.Rank <= len(cands) {
			cand = cands[o.Rank-1]
		}
		if spoken == "" || (cand != "" && spoken == cand) {
			o.Kind, o.SpokenChars = store.OutcomeSpoken, inf.CandidateChars[o.Rank-1]
			o.KeystrokesSaved = max(o.SpokenChars-1, 0)
			reply = cand
		} else {
			o.Kind, o.SpokenChars = store.OutcomeEdited, score.Chars(spoken)
			if cand != "" {
				// Without the suggestion's text the edit cannot be measured:
				// it counts 0 (see recentInferences).
				o.KeystrokesSaved = score.Edited(cand, spoken)
			}
		}
	default:
		o.Kind, o.SpokenChars = store.OutcomeTyped, score.Chars(spoken)
	}
	setActions(&o, steered, req.KeysPressed, req.Selections)
	remembered := inf.Remembered && inf.Texts != nil && reply != ""
	if !inf.Remembered {
		reply = "" // text is kept only for users who opted in
	}
	if _, err := s.store.SetOutcome(id, o, reply); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNoInference()
		}
		return err
	}
	s.metrics.observeOutcome(o, inf.PromptVersion)
	if mode, ok := o.KSRCounts(); ok {
		s.metrics.steer.observeKSR(mode, inf.PromptVersion, o.SpokenChars, o.KeysPressed+o.Selections)
	}
	return c.JSON(http.StatusOK, feedbackResponse{
		InferenceID: id, Outcome: o.Kind, KeystrokesSaved: o.KeystrokesSaved, Replaced: replaced, Remembered: remembered,
	})
}

// validateFeedback checks the fields that need no lookup; every message
// names the field.
func (s *Server) validateFeedback(r *feedbackRequest) error {
	if r.InferenceID == nil || *r.InferenceID == "" {
		return badRequest("inference_id is required: the inference_id of a /v1/infer answer")
	}
	if !inferenceIDPattern.MatchString(*r.InferenceID) {
		return badRequest("inference_id is malformed: it is the inference_id of a /v1/infer answer, such as inf_8kq0V2xqT0mJ4c9wZr1bYg")
	}
	noneFit := r.NoneFit != nil && *r.NoneFit
	if r.SpokenText != nil {
		if strings.TrimSpace(*r.SpokenText) == "" {
			return badRequest("spoken_text must not be empty; omit it when the user spoke a suggestion as it was")
		}
		if n := utf8.RuneCountInString(*r.SpokenText); n > s.limits.MaxContentChars {
			return badRequest("spoken_text has %d characters; the limit is %d", n, s.limits.MaxContentChars)
		}
	}
	if r.ChosenRank != nil {
		if *r.ChosenRank < 1 {
			return badRequest("chosen_rank must be 1 or more: the rank of the spoken candidate")
		}
		if noneFit {
			return badRequest("chosen_rank and none_fit: true contradict each other: send one of them")
		}
	}
	if r.ChosenRank == nil && r.SpokenText == nil && !noneFit {
		return badRequest("one of chosen_rank, spoken_text or none_fit: true is required")
	}
	if r.TimeToChoiceMS != nil && (*r.TimeToChoiceMS < 0 || *r.TimeToChoiceMS > maxTimeToChoice) {
		return badRequest("time_to_choice_ms must be between 0 and %d", maxTimeToChoice)
	}
	if err := validateActions(r.KeysPressed, r.Selections); err != nil {
		return err
	}
	return nil
}
