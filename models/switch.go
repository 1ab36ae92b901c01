package models

import "errors"

// SwitchRequest asks Service.Switch for a switch.
type SwitchRequest struct {
	Kind string // "llm" or "whisper"
	Path string // the model file
	// Mode is "auto" (or ""): beside the old model when both fit in
	// memory, else unload the old one first; "beside" refuses with
	// ErrNoRoom when they do not fit; "swap" always unloads
	// first.
	Mode string
}

// Switch is what a switch did: the body of a successful activate or
// rollback, with the file names (not the paths) of the models.
type Switch struct {
	Kind     string `json:"kind"`
	Model    string `json:"model"`
	Previous string `json:"previous"`
	// Mode is "beside" (the new model loaded while the old one served) or
	// "swap" (the old one was unloaded first; requests meanwhile got 503
	// loading).
	Mode string `json:"mode"`
	// Reason says why, with the memory figures.
	Reason string `json:"reason"`
	// BytesNeeded is the memory the new model is expected to take,
	// BytesAvailable what the system had available (-1 unknown).
	BytesNeeded    int64 `json:"bytes_needed"`
	BytesAvailable int64 `json:"bytes_available"`
	// LoadMS is how long the switch took, warm-up included.
	LoadMS int64 `json:"load_ms"`
	// Node is the box that switched.
	Node string `json:"node"`
}

// Errors of the model actions (wrapped), mapped by api's modelError.
var (
	// ErrBusy: another switch is running, or the engine is still
	// loading at start: 409 conflict.
	ErrBusy = errors.New("another model switch is in progress")
	// ErrNoRoom: mode "beside" and both models do not fit: 409.
	ErrNoRoom = errors.New("the new model does not fit in memory beside the old one")
	// ErrUnusable: the file cannot be used (it failed to load, or
	// is of no engine's kind): 422 invalid_model. The old model serves.
	ErrUnusable = errors.New("the model cannot be used")
)
