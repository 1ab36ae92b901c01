package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// The window declaration of a Whisper file (models/window.go): whether its
// weights are made for a short encoder window (FUTO's acft fine-tunes), so
// that REPLYD_WHISPER_WINDOW=auto sizes the window to the speech. The
// admin declares it with the upload (?short_window=true) or later (PUT
// /v1/admin/models/{name}/window); GET /v1/admin/models lists each Whisper
// file's in windows.

// windowBody is the JSON body of PUT /v1/admin/models/{name}/window.
type windowBody struct {
	ShortWindow *bool `json:"short_window"`
}

// declaredWindow is the answer of PUT /v1/admin/models/{name}/window.
type declaredWindow struct {
	File string `json:"file"`
	models.WindowDeclaration
	// Active: the file is the Whisper model loaded now, which uses the
	// declaration from now on; otherwise it applies when the file is
	// loaded (a switch, a timing, a start).
	Active bool `json:"active"`
}

// shortWindowParam reads the upload's optional ?short_window= (true or
// false): nil when absent. A language model's file (.gguf) has no window.
func shortWindowParam(c echo.Context, name string) (*bool, error) {
	v, ok := c.QueryParams()["short_window"]
	if !ok {
		return nil, nil
	}
	var short bool
	switch strings.Join(v, ",") {
	case "true":
		short = true
	case "false":
	default:
		return nil, badRequest("?short_window= must be true or false")
	}
	if strings.HasSuffix(name, ".gguf") {
		return nil, badRequest("?short_window= applies only to a Whisper model file (.bin); %s is a language model's name", name)
	}
	return &short, nil
}

func (s *Server) handleDeclareWindow(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	var b windowBody
	if err := s.readJSON(c, &b, false); err != nil {
		return err
	}
	if b.ShortWindow == nil {
		return badRequest("short_window is required: true when the weights are made for a short window (FUTO's acft fine-tunes), false for stock weights")
	}
	out, err := s.declareWindow(c, name, *b.ShortWindow)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// declareWindow stores the declaration, applies it to the loaded model
// when it is that file, and logs it.
func (s *Server) declareWindow(c echo.Context, name string, short bool) (declaredWindow, error) {
	d, err := s.models.DeclareWindow(name, short, s.now())
	if err != nil {
		return declaredWindow{}, err
	}
	out := declaredWindow{File: name, WindowDeclaration: d}
	out.Active = s.models.ApplyWindow(name, short)
	what := "stock weights (auto keeps the stock window rule)"
	if short {
		what = "weights made for a short window (auto sizes the window to the speech)"
	}
	s.adminLog(c, store.LevelInfo, name, "model window declared: %s: %s", name, what)
	return out, nil
}

// windowError maps the window declaration's errors; nil for others.
func windowError(err error) *Error {
	if errors.Is(err, models.ErrNotWhisper) {
		return &Error{Code: CodeInvalidRequest, Message: err.Error(), Err: err}
	}
	return nil
}
