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

// Kinds of ModelRecord.
const (
	ModelTiming     = "timing"     // POST /v1/admin/models/{name}/time
	ModelComparison = "comparison" // POST /v1/admin/models/{name}/compare
	// ModelWindow is the admin's declaration of what a Whisper file's
	// weights were made for (PUT /v1/admin/models/{name}/window): whether
	// the encoder's window may follow the speech.
	ModelWindow = "window"
)

// ModelRecord is what a box measured or was told of one of its model files:
// a timing, a comparison or a window declaration (What), kept so that a
// restart keeps them. Model files live
// on each box, so records are per box, like a ModelChoice. Body is the
// models feature's own JSON; the store keeps it as it is.
type ModelRecord struct {
	Node string `json:"node"`
	// File is the file's name in the box's models folder.
	File string `json:"file"`
	// What is ModelTiming, ModelComparison or ModelWindow.
	What string `json:"what"`
	// Bytes and ModTime identify the file measured or declared: a file
	// replaced since is another file.
	Bytes   int64     `json:"bytes"`
	ModTime time.Time `json:"mod_time"`
	// At is when the record was written.
	At   time.Time `json:"at"`
	Body []byte    `json:"body"`
}

// ValidModelRecord checks what both stores require of a ModelRecord.
func ValidModelRecord(r ModelRecord) bool {
	return r.Node != "" && r.File != "" && (r.What == ModelTiming || r.What == ModelComparison || r.What == ModelWindow) && len(r.Body) > 0
}
