package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine/modelfile"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// DefaultMaxModelBytes bounds a model upload when Options.MaxModelBytes is
// 0: room for a 7B model at q8_0 or Whisper large at f16.
const DefaultMaxModelBytes = 16 << 30

// modelFolder is the models folder the admin API manages: one upload at a
// time, and each file's check and SHA-256 kept while its size and time are
// unchanged, so that a listing does not hash gigabytes each time.
type modelFolder struct {
	dir      string
	maxBytes int64
	upload   chan struct{} // one upload at a time
	mu       sync.Mutex    // one listing at a time; guards cache
	cache    map[string]cachedModel
	// holds names, by file name, the model action (an activation, a timing,
	// a comparison) that uses the file: the file cannot be removed, nor
	// used by a second action, until it ends.
	holds map[string]string
	free  func(string) (int64, error) // nil: modelfile.Free; tests replace it
	// write, when set, wraps an upload's writes to the disk: tests make
	// the disk fill with it.
	write func(io.Writer) io.Writer
}

type cachedModel struct {
	size  int64
	mtime time.Time
	e     modelfile.Entry
}

func newModelFolder(dir string, maxBytes int64) *modelFolder {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxModelBytes
	}
	if dir != "" {
		modelfile.Sweep(dir) // uploads a crash interrupted
	}
	return &modelFolder{dir: dir, maxBytes: maxBytes, upload: make(chan struct{}, 1), cache: map[string]cachedModel{}, holds: map[string]string{}}
}

// hold reserves the folder's file name for a model action, what ("being
// activated", "being timed", "being compared"), until release is called:
// a removal of the file, or another action on it, meanwhile is 409
// conflict naming what holds it. Taking the hold before the file is
// checked closes the window in which a removal could delete a file that an
// engine is loading.
func (f *modelFolder) hold(name, what string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.holds[name]; ok {
		return nil, errorf(CodeConflict, "%s is %s: retry when that has finished", name, h)
	}
	f.holds[name] = what
	return func() {
		f.mu.Lock()
		delete(f.holds, name)
		f.mu.Unlock()
	}, nil
}

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
}

func (s *Server) modelsConfigured() error {
	if s.models.dir == "" {
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
	want, err := filepath.Abs(filepath.Join(s.models.dir, name))
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
	man, err := models.Embedded()
	if err != nil {
		return err
	}
	f := s.models
	f.mu.Lock()
	defer f.mu.Unlock()
	des, err := os.ReadDir(f.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out := modelList{Models: []modelfile.Entry{}, FreeBytes: -1, MaxBytes: f.maxBytes}
	seen := map[string]os.FileInfo{}
	for _, de := range des {
		if !de.Type().IsRegular() || !modelfile.ValidName(de.Name()) {
			continue
		}
		st, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		name := de.Name()
		seen[name] = st
		ce, ok := f.cache[name]
		if !ok || ce.size != st.Size() || !ce.mtime.Equal(st.ModTime()) {
			e, err := modelfile.Describe(filepath.Join(f.dir, name), man)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			ce = cachedModel{size: st.Size(), mtime: st.ModTime(), e: e}
			f.cache[name] = ce
		}
		e := ce.e
		e.Active = s.activeModel(name)
		out.Models = append(out.Models, e)
	}
	for name := range f.cache {
		if seen[name] == nil {
			delete(f.cache, name)
		}
	}
	recs, err := s.readModelRecords(func(name string) os.FileInfo { return seen[name] })
	if err != nil {
		return err
	}
	out.Timings = recs.timings
	if n, err := f.freeBytes(); err == nil {
		out.FreeBytes = n
	}
	out.Node = s.node
	if out.Boxes, err = s.modelChoices(); err != nil {
		return err
	}
	_, out.Switch = s.health.(models.Switcher)
	_, out.Time = s.health.(models.Timer)
	_, out.Compare = s.health.(models.Comparer)
	// The stored comparisons, and over them those of this run (one may be
	// running) of the files still there.
	for n, c := range s.compares.all() {
		if seen[n] != nil {
			recs.comparisons[n] = c
		}
	}
	if len(recs.comparisons) > 0 {
		out.Comparisons = recs.comparisons
	}
	return c.JSON(http.StatusOK, out)
}

func (f *modelFolder) freeBytes() (int64, error) {
	if f.free != nil {
		return f.free(f.dir)
	}
	if err := os.MkdirAll(f.dir, 0o750); err != nil {
		return 0, err
	}
	return modelfile.Free(f.dir)
}

// handleUploadModel takes a model file as the raw request body (any
// Content-Type) under the name given by ?name=. The body streams to a
// temporary file in the folder; the file is checked and renamed into place.
// The Content-Length, when given, is checked against the bound and the free
// space before a byte is read. A disk that fills while the body is copied,
// chunked or not, is 507 insufficient_storage with the bytes written and
// the bytes free. A dropped connection or a full disk leaves nothing behind;
// a re-sent upload starts again from the first byte.
func (s *Server) handleUploadModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	f := s.models
	name := c.QueryParam("name")
	if !modelfile.ValidName(name) {
		return badRequest("?name= must be a model file name of letters, digits, '.', '_' and '-', ending in .gguf or .bin")
	}
	r := c.Request()
	if r.ContentLength > f.maxBytes {
		s.adminLog(c, store.LevelWarn, name, "model upload refused: %s is %d bytes, the limit is %d", name, r.ContentLength, f.maxBytes)
		return errorf(CodePayloadTooLarge, "the model file is %d bytes; the limit is %s", r.ContentLength, formatBytes(f.maxBytes))
	}
	select {
	case f.upload <- struct{}{}:
		defer func() { <-f.upload }()
	default:
		return errorf(CodeConflict, "another model upload is in progress; retry when it has finished")
	}
	man, err := models.Embedded()
	if err != nil {
		return err
	}
	free := f.free
	if free == nil {
		free = modelfile.Free
	}
	e, err := modelfile.Add(f.dir, name, r.Body, modelfile.AddOptions{Size: r.ContentLength, MaxBytes: f.maxBytes, Free: free, Manifest: man, Writer: f.write})
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
	return c.JSON(http.StatusCreated, e)
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
	s.models.mu.Lock()
	if h, ok := s.models.holds[name]; ok {
		s.models.mu.Unlock()
		return errorf(CodeConflict, "%s is %s: it cannot be removed until that has finished", name, h)
	}
	err = modelfile.Remove(s.models.dir, name, s.activeModel)
	s.models.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.store.DeleteModelRecords(s.node, name); err != nil {
		// The records of a file no longer there are not listed anyway.
		s.log.Warn("the removed model's timing and comparison could not be deleted", "model", name, "error", err.Error())
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
	case errors.Is(err, modelfile.ErrActive):
		return &Error{Code: CodeConflict, Message: err.Error() + ": switch to another model before removing it", Err: err}
	case errors.Is(err, modelfile.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error(), Err: err}
	case errors.Is(err, modelfile.ErrBadName):
		return &Error{Code: CodeInvalidRequest, Message: err.Error(), Err: err}
	case switchError(err) != nil:
		return switchError(err)
	case errors.Is(err, modelfile.ErrShort):
		return &Error{Code: CodeInvalidRequest, Message: "the upload ended before the announced Content-Length; send the file again", Err: err}
	}
	return nil
}
