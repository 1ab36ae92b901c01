package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/models/modelfile"
	"github.com/replyd/replyd/store"
)

// The window declaration of a Whisper file. Whisper's encoder can work on
// a window sized to what was said (whisper.cpp's audio_ctx), but stock
// weights, trained on 30 s windows only, repeat themselves there
// (futo-org/whisper-acft's README: tiny.en 4.73% WER at 1500 positions,
// 225.99% with the dynamic window); FUTO's "acft" fine-tunes are made for
// it (5.50%). Their publisher gives no checksum for the ggml files
// (scripts/fetch-models.sh --unpinned), so replyd cannot know them by
// their bytes: the admin declares them, when the file is added or later in
// the Models view, and the declaration is stored with the file's records
// (store.ModelWindow), per box, for the file as it was (its size and
// modification time: a file replaced since is another file). A file with
// no declaration, or outside the models folder, gets the configured
// default (REPLYD_WHISPER_SHORT_WINDOW). REPLYD_WHISPER_WINDOW=auto uses
// the speech's own window for a file declared so, and the stock rule
// otherwise (engine/whisper's window.go).

// Sources of a WindowDeclaration.
const (
	// WindowDeclared: the admin declared it for this file.
	WindowDeclared = "declared"
	// WindowDefault: the file has no declaration; the configured default
	// (REPLYD_WHISPER_SHORT_WINDOW) applies.
	WindowDefault = "default"
)

// WindowDeclaration says whether a Whisper file's weights are made for a
// short encoder window, and why replyd believes it.
type WindowDeclaration struct {
	// ShortWindow: the weights are made for a short window (FUTO's acft
	// fine-tunes), so REPLYD_WHISPER_WINDOW=auto sizes the window to the
	// speech; false: stock weights, auto keeps the stock rule.
	ShortWindow bool `json:"short_window"`
	// Source is WindowDeclared or WindowDefault.
	Source string `json:"source"`
	// At is when it was declared; zero (absent) for the default.
	At time.Time `json:"at,omitzero"`
}

// windowBody is a ModelWindow record's body.
type windowBody struct {
	ShortWindow bool `json:"short_window"`
}

// ErrNotWhisper: a window is declared only for a checked Whisper file: 400.
var ErrNotWhisper = errors.New("only a Whisper model file has an encoder window to declare")

// WindowSetter is what can take a new declaration for the Whisper model
// loaded now (cmd/replyd's engines: ServiceOptions.Windows); without it a
// declaration applies at the next load or switch.
type WindowSetter interface {
	// SetShortWindow applies short to the loaded Whisper model when it is
	// the file path, and reports whether it was.
	SetShortWindow(path string, short bool) bool
}

// ApplyWindow gives the declaration of the folder's file name to the
// Whisper model loaded now when it is that file (ServiceOptions.Windows),
// and reports whether it was.
func (s *Service) ApplyWindow(name string, short bool) bool {
	if s.windows == nil {
		return false
	}
	path, err := filepath.Abs(filepath.Join(s.dir, name))
	if err != nil {
		return false
	}
	return s.windows.SetShortWindow(path, short)
}

// DeclareWindow stores the admin's declaration of the folder's file name
// (already checked with modelfile.ValidName), a checked Whisper file
// (ErrNotWhisper otherwise; modelfile.ErrNotFound when it is not there),
// as this box's record of the file as it is now, declared at at, and
// returns it.
func (s *Service) DeclareWindow(name string, short bool, at time.Time) (WindowDeclaration, error) {
	path := filepath.Join(s.dir, name)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return WindowDeclaration{}, fmt.Errorf("%w: %s", modelfile.ErrNotFound, name)
	}
	if err != nil {
		return WindowDeclaration{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return WindowDeclaration{}, err
	}
	info, err := modelfile.Check(f, st.Size())
	if err != nil || info.Kind != modelfile.KindWhisper {
		return WindowDeclaration{}, fmt.Errorf("%w: %s is not a checked Whisper file", ErrNotWhisper, name)
	}
	b, err := json.Marshal(windowBody{ShortWindow: short})
	if err != nil {
		return WindowDeclaration{}, err
	}
	at = at.UTC().Truncate(time.Second)
	if err := s.store.PutModelRecord(store.ModelRecord{Node: s.node, File: name, What: store.ModelWindow,
		Bytes: st.Size(), ModTime: st.ModTime(), At: at, Body: b}); err != nil {
		return WindowDeclaration{}, err
	}
	return WindowDeclaration{ShortWindow: short, Source: WindowDeclared, At: at}, nil
}

// WindowOf is the declaration that applies to the Whisper file at path on
// box node: the one stored for the file as it is now when path is in the
// models folder dir, else the default def. On a store error it returns the
// default and the error (the caller warns: a declaration it cannot read
// is not one to load a model with).
func WindowOf(st RecordStore, node, dir, path string, def bool) (WindowDeclaration, error) {
	out := WindowDeclaration{ShortWindow: def, Source: WindowDefault}
	if dir == "" || st == nil {
		return out, nil
	}
	abs, err1 := filepath.Abs(path)
	adir, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil || filepath.Dir(abs) != adir {
		return out, nil // not a file of the models folder: no record
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return out, nil
	}
	recs, err := st.ModelRecords(node)
	if err != nil {
		return out, err
	}
	name := filepath.Base(abs)
	for _, r := range recs {
		if r.File == name && r.What == store.ModelWindow {
			if d, ok := windowRecord(r, fi); ok {
				return d, nil
			}
		}
	}
	return out, nil
}

// windowRecord decodes a ModelWindow record of the file now fi; false when
// the file was replaced since or the body is not one.
func windowRecord(r store.ModelRecord, fi os.FileInfo) (WindowDeclaration, bool) {
	if fi == nil || fi.Size() != r.Bytes || !fi.ModTime().Equal(r.ModTime) {
		return WindowDeclaration{}, false
	}
	var b windowBody
	if json.Unmarshal(r.Body, &b) != nil {
		return WindowDeclaration{}, false
	}
	return WindowDeclaration{ShortWindow: b.ShortWindow, Source: WindowDeclared, At: r.At.UTC()}, true
}

// WindowOf is the declaration that applies to the Whisper file at path on
// this box (the package's WindowOf with the Service's folder, store and
// default).
func (s *Service) WindowOf(path string) (WindowDeclaration, error) {
	return WindowOf(s.store, s.node, s.dir, path, s.shortDefault)
}
