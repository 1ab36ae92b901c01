package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/models/modelfile"
	"github.com/replyd/replyd/store"
)

// modelList is the body of GET /v1/admin/models.
type modelList struct {
	Models []modelfile.Entry `json:"models"`
	// FreeBytes is the free space of the folder's disk, -1 when unknown.
	FreeBytes int64 `json:"free_bytes"`
	// MaxBytes bounds an upload.
	MaxBytes int64 `json:"max_bytes"`
	// Node is this box; Boxes what each box chose on the admin page (the
	// boxes sharing a PostgreSQL store each keep their own), by node and
	// kind. Switch is whether this box can switch models while it runs.
	Node   string      `json:"node"`
	Boxes  []boxModels `json:"boxes"`
	Switch bool        `json:"switch"`
	// Timings are the files' stored timings (POST .../{name}/time), by
	// file name, kept in the store: a restart keeps them. Time is whether
	// this box can time models.
	Timings map[string]*models.Timing `json:"timings"`
	Time    bool                      `json:"time"`
	// Compare is whether this box can compare a language model with the
	// active one on the recorded turns (POST .../{name}/compare);
	// Comparisons the latest comparison of each file, running or finished
	// (finished ones are kept in the store: a restart keeps them; absent
	// when there is none).
	Compare     bool                          `json:"compare"`
	Comparisons map[string]*models.Comparison `json:"comparisons,omitempty"`
	// Windows is each checked Whisper file's window declaration
	// (modelwindow.go), by file name; absent when there is none.
	Windows map[string]*models.WindowDeclaration `json:"windows,omitempty"`
}

func (s *Server) modelsConfigured() error {
	if s.models == nil || s.models.Dir() == "" {
		return errorf(CodeNotSupported, "this server has no models folder")
	}
	return nil
}

// activeModel reports whether the folder's file name is a model an engine
// has loaded (its path, as the engines report it, names the same file).
func (s *Server) activeModel(name string) bool {
	if s.health == nil {
		return false
	}
	want, err := filepath.Abs(filepath.Join(s.models.Dir(), name))
	if err != nil {
		return false
	}
	wst, werr := os.Stat(want)
	for _, e := range s.health.Engines() {
		if e.Model == "" {
			continue
		}
		if p, err := filepath.Abs(e.Model); err == nil && p == want {
			return true
		}
		// The engine may name the file through a link or another path.
		if st, err := os.Stat(e.Model); err == nil && werr == nil && os.SameFile(st, wst) {
			return true
		}
	}
	return false
}

func (s *Server) handleListModels(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	l, err := s.models.List()
	if err != nil {
		return err
	}
	out := modelList{Models: l.Entries, FreeBytes: -1, MaxBytes: s.models.MaxBytes(), Timings: l.Timings, Comparisons: l.Comparisons,
		Windows: l.Windows}
	for i := range out.Models {
		out.Models[i].Active = s.activeModel(out.Models[i].File)
	}
	if n, err := s.models.FreeBytes(); err == nil {
		out.FreeBytes = n
	}
	out.Node = s.node
	if out.Boxes, err = s.modelChoices(); err != nil {
		return err
	}
	out.Switch, out.Time, out.Compare = s.models.CanSwitch(), s.models.CanTime(), s.models.CanCompare()
	return c.JSON(http.StatusOK, out)
}

// handleUploadModel takes a model file as the raw request body (any
// Content-Type) under the name given by ?name=. The body streams to a
// temporary file in the folder; the file is checked and renamed into place.
// The Content-Length, when given, is checked against the bound and the free
// space before a byte is read. A disk that fills while the body is copied,
// chunked or not, is 507 insufficient_storage with the bytes written and
// the bytes free. A dropped connection or a full disk leaves nothing behind;
// a re-sent upload starts again from the first byte. An optional
// ?short_window= declares a Whisper file's window with the upload
// (modelwindow.go).
func (s *Server) handleUploadModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	name := c.QueryParam("name")
	if !modelfile.ValidName(name) {
		return badRequest("?name= must be a model file name of letters, digits, '.', '_' and '-', ending in .gguf or .bin")
	}
	short, err := shortWindowParam(c, name)
	if err != nil {
		return err
	}
	_, statErr := os.Stat(filepath.Join(s.models.Dir(), name))
	existed := statErr == nil
	r := c.Request()
	if max := s.models.MaxBytes(); r.ContentLength > max {
		s.adminLog(c, store.LevelWarn, name, "model upload refused: %s is %d bytes, the limit is %d", name, r.ContentLength, max)
		return errorf(CodePayloadTooLarge, "the model file is %d bytes; the limit is %s", r.ContentLength, formatBytes(max))
	}
	e, err := s.models.Upload(name, r.Body, r.ContentLength)
	if errors.Is(err, models.ErrUploadBusy) {
		return errorf(CodeConflict, "%s", err.Error())
	}
	if errors.Is(err, modelfile.ErrShort) && r.ContentLength < 0 {
		err = &Error{Code: CodeInvalidRequest, Message: "the upload was cut off before its end (it was sent without a Content-Length); send the file again", Err: err}
	}
	if err != nil {
		ae := toAPIError(err)
		if ae.Code != CodeInternal {
			s.adminLog(c, store.LevelWarn, name, "model upload refused: %s: %s", name, ae.Message)
		}
		return ae
	}
	e.Active = s.activeModel(name)
	s.adminLog(c, store.LevelInfo, name, "model uploaded: %s (%s, %d bytes, sha256 %s, %s)", name, e.Kind, e.Bytes, e.SHA256, e.Manifest)
	out := uploaded{Entry: e}
	if short != nil {
		d, err := s.declareWindow(c, name, *short)
		if errors.Is(err, models.ErrNotWhisper) {
			// A window was asked for a file that has none: the request
			// fails as a whole, so the file it added is not kept.
			if !existed {
				_ = s.models.Remove(name, s.activeModel)
			}
			s.adminLog(c, store.LevelWarn, name, "model upload refused: %s: it is a %s file and ?short_window= applies only to Whisper files", name, e.Kind)
			return errorf(CodeInvalidModel, "the model file was refused: ?short_window= applies only to a Whisper model file and %s is a %s file", name, e.Kind)
		}
		if err != nil {
			return err
		}
		out.Window = &d.WindowDeclaration
	}
	return c.JSON(http.StatusCreated, out)
}

// uploaded is the answer of an upload: the file's entry and, when the
// upload declared it, its window.
type uploaded struct {
	modelfile.Entry
	Window *models.WindowDeclaration `json:"window,omitempty"`
}

// modelNameParam is the route's {name}: a model file name the folder can
// hold, or 400.
func modelNameParam(c echo.Context) (string, error) {
	name := c.Param("name")
	if !modelfile.ValidName(name) {
		return "", badRequest("the model file name must be letters, digits, '.', '_' and '-', ending in .gguf or .bin")
	}
	return name, nil
}

func (s *Server) handleDeleteModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	if err := s.models.Remove(name, s.activeModel); err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, name, "model removed: %s", name)
	return c.NoContent(http.StatusNoContent)
}

// modelError maps the models folder's errors to API errors; nil for other
// errors. It is called from toAPIError, the one place errors are mapped.
func modelError(err error) *Error {
	var ns *modelfile.NoSpaceError
	switch {
	case errors.As(err, &ns):
		return &Error{Code: CodeInsufficientStorage, Message: ns.Error() + "; free space on it or upload a smaller file", Err: err}
	case errors.Is(err, modelfile.ErrInvalid):
		return &Error{Code: CodeInvalidModel, Message: "the model file was refused: " + err.Error(), Err: err}
	case errors.Is(err, modelfile.ErrTooLarge):
		return &Error{Code: CodePayloadTooLarge, Message: err.Error(), Err: err}
	case errors.Is(err, modelfile.ErrExists):
		return &Error{Code: CodeConflict, Message: err.Error() + "; remove it first or choose another name", Err: err}
	case errors.Is(err, models.ErrHeld) || errors.Is(err, models.ErrCompareRunning):
		return &Error{Code: CodeConflict, Message: err.Error(), Err: err}
	case errors.Is(err, modelfile.ErrActive):
		return &Error{Code: CodeConflict, Message: err.Error() + ": switch to another model before removing it", Err: err}
	case errors.Is(err, modelfile.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error(), Err: err}
	case errors.Is(err, modelfile.ErrBadName):
		return &Error{Code: CodeInvalidRequest, Message: err.Error(), Err: err}
	case errors.Is(err, models.ErrNotSupported):
		return &Error{Code: CodeNotSupported, Message: err.Error(), Err: err}
	case switchError(err) != nil:
		return switchError(err)
	case windowError(err) != nil:
		return windowError(err)
	case errors.Is(err, modelfile.ErrShort):
		return &Error{Code: CodeInvalidRequest, Message: "the upload ended before the announced Content-Length; send the file again", Err: err}
	}
	return nil
}
