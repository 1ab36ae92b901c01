package models

import (
	"context"
	"errors"
)

// Bounds of POST /v1/admin/models/{name}/compare's turns.
const (
	DefaultCompareTurns = 20
	MaxCompareTurns     = 200
)

// CompareRun loads the candidate, replays turns through it and through
// the active model, calls progress(done, total) after every replay, frees
// the candidate and releases the Service's model action. Errors wrap
// ErrUnusable (the candidate failed to load) or are ctx's.
type CompareRun func(ctx context.Context, turns []CompareTurn, progress func(done, total int)) (CompareResult, error)

// ErrCompareNoRoom: the candidate does not fit in memory beside the
// active model; a comparison never unloads the active one: 409.
var ErrCompareNoRoom = errors.New("the model cannot be compared: it does not fit in memory beside the active one")

// CompareTurn is one recorded turn to replay: the partner's turn, what the
// user spoke after it, and the live request's settings as far as the log
// keeps them.
type CompareTurn struct {
	Partner string // the partner's turn the candidates answered
	Reply   string // what the user spoke: a candidate, edited or not, or typed
	// SystemPrompt is the text of the prompt version the turn used (the
	// current prompt when that version is no longer in the history).
	SystemPrompt string
	// Candidates is how many candidates the turn was answered with.
	Candidates  int
	Temperature float64
	// SteerMode is the steering mode of the answer the reply came from
	// ("words", "prefix", "replace"), "" when unsteered.
	SteerMode string
}

// CompareFigures are one model's figures over the replayed turns.
type CompareFigures struct {
	Model string `json:"model"`
	// Turns is how many turns were replayed through the model.
	Turns int `json:"turns"`
	// ExactRate: the share of turns whose spoken reply was one of the
	// candidates after score.Normalize (case, punctuation and spaces
	// ignored); Top1Rate: the first candidate; NearRate: a candidate
	// within one word of it (word-level Levenshtein distance of the
	// normalized texts <= 1, score.WordEditDistance), exact ones included.
	ExactRate float64 `json:"exact_rate"`
	Top1Rate  float64 `json:"top1_rate"`
	NearRate  float64 `json:"near_rate"`
	// KeystrokesSaved over KeystrokesTyped (the spoken replies' characters):
	// issue 12's rule (score.Edited, the best candidate taken and edited
	// into the reply), as replyd eval counts it.
	KeystrokesSaved int     `json:"keystrokes_saved"`
	KeystrokesTyped int     `json:"keystrokes_typed"`
	KeystrokeSaving float64 `json:"keystroke_saving"`
	// SteeredTurns are the turns whose reply came from a steered answer,
	// replayed steered as replyd eval --steer simulates the logged mode;
	// SteeredKSR = (characters - simulated actions) / characters over them.
	SteeredTurns int     `json:"steered_turns"`
	SteeredHits  int     `json:"steered_hits"`
	SteeredKSR   float64 `json:"steered_ksr"`
	// TurnMS is the mean time of one unsteered replay (prompt and
	// candidates, time spent giving way to requests included), and
	// ReplyTokens the mean tokens generated per candidate.
	TurnMS      float64 `json:"turn_ms"`
	ReplyTokens float64 `json:"reply_tokens"`
}

// CompareResult is what a CompareRun measured.
type CompareResult struct {
	// Reason says why the candidate could load beside the active model.
	Reason string
	// Preempted counts replays stopped for a request and run again.
	Preempted int
	Candidate CompareFigures
	Active    CompareFigures
}

// Comparison is the body of POST and GET
// /v1/admin/models/{name}/compare: a comparison running or finished. It
// holds figures only, never dialog text.
type Comparison struct {
	Kind  string `json:"kind"`
	Node  string `json:"node"`
	Model string `json:"model"`
	// State is "running", "done" or "failed" (Error says why).
	State string `json:"state"`
	// Turns is how many turns were asked for, TurnsFound how many recorded
	// turns with an outcome and its text there were to replay (at most
	// Turns, the latest).
	Turns       int     `json:"turns"`
	TurnsFound  int     `json:"turns_found"`
	Temperature float64 `json:"temperature"`
	// Done of Total replays (each turn once per model, steered turns
	// twice).
	Done       int        `json:"done"`
	Total      int        `json:"total"`
	StartedAt  string     `json:"started_at"`
	FinishedAt string     `json:"finished_at,omitempty"`
	Error      *ErrorBody `json:"error,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Preempted  int        `json:"preempted"`
	// Candidate and Active are set once State is "done".
	Candidate *CompareFigures `json:"candidate,omitempty"`
	Active    *CompareFigures `json:"active,omitempty"`
}

// ErrorBody is a failed comparison's error, in the API's {error, message}
// shape.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}
