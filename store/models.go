package store

import "time"

// ModelChoice is the model a box chose for one of its engines from the
// admin page (Store.SetModelChoice). Model files live on each box, so the
// choice is kept per box: boxes sharing a PostgreSQL store each keep their
// own.
type ModelChoice struct {
	// Node is the box's name (REPLYD_NODE_NAME).
	Node string `json:"node"`
	// Kind is the engine: "llm" or "whisper".
	Kind string `json:"kind"`
	// Model is the path of the model file on that box.
	Model string `json:"model"`
	// Previous is the path of the model it replaced, "" when none: what a
	// roll back returns to.
	Previous string `json:"previous"`
	// At is when the choice was made.
	At time.Time `json:"at"`
}

// ValidModelChoice checks what both stores require of a ModelChoice.
func ValidModelChoice(c ModelChoice) bool {
	return c.Node != "" && c.Kind != "" && c.Model != ""
}
