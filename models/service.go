package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/disk"
	"github.com/replyd/replyd/models/modelfile"
	"github.com/replyd/replyd/store"
)

// DefaultMaxBytes bounds a model upload when ServiceOptions.MaxBytes is 0:
// room for a 7B model at q8_0 or Whisper large at f16.
const DefaultMaxBytes = 16 << 30

// RecordStore is what the Service keeps in the store: each box's timings,
// comparisons and window declarations of its files (store.Store has it).
type RecordStore interface {
	PutModelRecord(r store.ModelRecord) error
	ModelRecords(node string) ([]store.ModelRecord, error)
	DeleteModelRecords(node, file string) error
}

// ServiceOptions configure a Service.
type ServiceOptions struct {
	// Dir is the models folder; "" means this box has none.
	Dir string
	// MaxBytes bounds an upload; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Node is this box: its records are its own.
	Node  string
	Store RecordStore
	// Log receives the warnings of the timings' migration and the model
	// actions' lines; nil discards.
	Log *slog.Logger
	// Engines switch the running engines' models: nil, this box cannot
	// switch, time or compare models while it runs (ErrNotSupported). LLM
	// and STT open candidates and lend the active models for a timing (both
	// needed) and a comparison (LLM), at the idle priority of CPU, the
	// engines' scheduler.
	Engines Engines
	LLM     LanguageModels
	STT     SpeechModels
	CPU     *engine.Scheduler
	// MemAvailable reads the memory available for a model beside the
	// active one; nil means the package's MemAvailable (/proc/meminfo).
	MemAvailable func() (int64, error)
	// Now is the clock the actions are timed with; nil means time.Now.
	Now func() time.Time
	// ShortWindowDefault is the window declaration of a Whisper file the
	// admin declared nothing of (REPLYD_WHISPER_SHORT_WINDOW; window.go).
	ShortWindowDefault bool
	// Windows applies a declaration to the Whisper model loaded now
	// (cmd/replyd's engines); nil: a declaration applies at the next load.
	Windows WindowSetter
}

// Service is the models folder of one box and the model actions on its
// files, under one lock: the listing's cache of checks, the hold each
// action (an activation, a timing, a comparison) has on its file, which a
// removal respects, the one model action on the engines at a time (a
// switch, a timing or a comparison), the one upload at a time, the
// comparisons of this run, and the timings and comparisons kept in the
// store.
type Service struct {
	dir      string
	maxBytes int64
	node     string
	store    RecordStore
	log      *slog.Logger
	upload   chan struct{} // one upload at a time
	// shortDefault is ServiceOptions.ShortWindowDefault.
	shortDefault bool
	windows      WindowSetter

	engines      Engines
	llm          LanguageModels
	stt          SpeechModels
	cpu          *engine.Scheduler
	memAvailable func() (int64, error)
	now          func() time.Time

	// FreeSpace reports the free bytes of the folder's disk; nil means
	// disk.Free. WrapWrite, when set, wraps an upload's writes. Tests
	// set them (a disk that fills) before the first request.
	FreeSpace func(dir string) (int64, error)
	WrapWrite func(io.Writer) io.Writer

	mu     sync.Mutex // the one lock: cache, holds, the action, the comparisons
	cache  map[string]cachedEntry
	holds  map[string]string
	acting bool // a switch, a timing or a comparison runs (beginAction)
	jobs   compareJobs
}

type cachedEntry struct {
	size  int64
	mtime time.Time
	e     modelfile.Entry
}

// compareJobs are the comparisons of this run, by file name: one runs at
// a time. Guarded by Service.mu.
type compareJobs struct {
	byName  map[string]*Comparison
	running string             // the file being compared, "" when none
	cancel  context.CancelFunc // the running one's
	wg      sync.WaitGroup
}

// NewService opens the models folder of o.Dir: it removes what a crash left
// of an upload and moves the timings an earlier replyd kept as files into
// the store.
func NewService(o ServiceOptions) *Service {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MemAvailable == nil {
		o.MemAvailable = MemAvailable
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Service{dir: o.Dir, maxBytes: o.MaxBytes, node: o.Node, store: o.Store, log: o.Log,
		upload: make(chan struct{}, 1), cache: map[string]cachedEntry{}, holds: map[string]string{},
		engines: o.Engines, llm: o.LLM, stt: o.STT, cpu: o.CPU, memAvailable: o.MemAvailable, now: o.Now,
		shortDefault: o.ShortWindowDefault, windows: o.Windows}
	if s.dir != "" {
		modelfile.Sweep(s.dir) // uploads a crash interrupted
		s.migrateTimings()
	}
	return s
}

// Dir is the models folder, "" when this box has none.
func (s *Service) Dir() string { return s.dir }

// MaxBytes bounds an upload.
func (s *Service) MaxBytes() int64 { return s.maxBytes }

// ErrHeld: the file is used by a model action (HeldError says which).
var ErrHeld = errors.New("the model file is in use by a model action")

// HeldError says what holds a file.
type HeldError struct {
	File string
	// What is "being activated", "being timed" or "being compared".
	What string
	// Remove is whether the refused operation was a removal.
	Remove bool
}

func (e *HeldError) Error() string {
	if e.Remove {
		return fmt.Sprintf("%s is %s: it cannot be removed until that has finished", e.File, e.What)
	}
	return fmt.Sprintf("%s is %s: retry when that has finished", e.File, e.What)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Hold reserves the folder's file name for a model action, what ("being
// activated", "being timed", "being compared"), until release is called:
// a removal of the file, or another action on it, meanwhile is a
// *HeldError. Taking the hold before the file is checked closes the window
// in which a removal could delete a file that an engine is loading.
func (s *Service) Hold(name, what string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holds[name]; ok {
		return nil, &HeldError{File: name, What: h}
	}
	s.holds[name] = what
	return func() {
		s.mu.Lock()
		delete(s.holds, name)
		s.mu.Unlock()
	}, nil
}

// Remove deletes the folder's file name unless an action holds it
// (*HeldError) or active says an engine uses it (modelfile.ErrActive), and
// then this box's records of it.
func (s *Service) Remove(name string, active func(name string) bool) error {
	s.mu.Lock()
	if h, ok := s.holds[name]; ok {
		s.mu.Unlock()
		return &HeldError{File: name, What: h, Remove: true}
	}
	err := modelfile.Remove(s.dir, name, active)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.store.DeleteModelRecords(s.node, name); err != nil {
		// The records of a file no longer there are not listed anyway.
		s.log.Warn("the removed model's timing and comparison could not be deleted", "model", name, "error", err.Error())
	}
	return nil
}

// ErrUploadBusy: another upload is running.
var ErrUploadBusy = errors.New("another model upload is in progress; retry when it has finished")

// Upload copies the file name of size bytes (-1 unknown) from body into
// the folder, checked (modelfile.Add), one upload at a time
// (ErrUploadBusy).
func (s *Service) Upload(name string, body io.Reader, size int64) (modelfile.Entry, error) {
	select {
	case s.upload <- struct{}{}:
		defer func() { <-s.upload }()
	default:
		return modelfile.Entry{}, ErrUploadBusy
	}
	man, err := Embedded()
	if err != nil {
		return modelfile.Entry{}, err
	}
	return modelfile.Add(s.dir, name, body, modelfile.AddOptions{Size: size, MaxBytes: s.maxBytes, Free: s.free,
		Manifest: man, Writer: s.WrapWrite})
}

// FreeBytes is the free space of the folder's disk.
func (s *Service) FreeBytes() (int64, error) {
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return 0, err
	}
	return s.free(s.dir)
}

func (s *Service) free(dir string) (int64, error) {
	if s.FreeSpace != nil {
		return s.FreeSpace(dir)
	}
	return disk.Free(dir)
}

// Listing is the folder's model files, checked against the manifest, with
// this box's records of those still as they were measured.
type Listing struct {
	Entries     []modelfile.Entry // by name; Active not set
	Timings     map[string]*Timing
	Comparisons map[string]*Comparison // nil when none
	// Windows is the window declaration of each checked Whisper file
	// (window.go), stored or the default; nil when there is none.
	Windows map[string]*WindowDeclaration
}

// List describes the folder's model files, each check and SHA-256 kept
// while the file's size and time are unchanged (a listing does not hash
// gigabytes each time), with the stored timings and the comparisons,
// this run's over the stored ones.
func (s *Service) List() (Listing, error) {
	man, err := Embedded()
	if err != nil {
		return Listing{}, err
	}
	des, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Listing{}, err
	}
	out := Listing{Entries: []modelfile.Entry{}}
	seen := map[string]os.FileInfo{}
	s.mu.Lock()
	for _, de := range des {
		if !de.Type().IsRegular() || !modelfile.ValidName(de.Name()) {
			continue
		}
		st, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		name := de.Name()
		ce, ok := s.cache[name]
		if !ok || ce.size != st.Size() || !ce.mtime.Equal(st.ModTime()) {
			e, err := modelfile.Describe(filepath.Join(s.dir, name), man)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				s.mu.Unlock()
				return Listing{}, err
			}
			ce = cachedEntry{size: st.Size(), mtime: st.ModTime(), e: e}
			s.cache[name] = ce
		}
		seen[name] = st
		out.Entries = append(out.Entries, ce.e)
	}
	for name := range s.cache {
		if seen[name] == nil {
			delete(s.cache, name)
		}
	}
	s.mu.Unlock()
	recs, err := s.records(func(name string) os.FileInfo { return seen[name] })
	if err != nil {
		return Listing{}, err
	}
	for n, c := range s.comparisons() {
		if seen[n] != nil {
			recs.comparisons[n] = c
		}
	}
	out.Timings = recs.timings
	if len(recs.comparisons) > 0 {
		out.Comparisons = recs.comparisons
	}
	for _, e := range out.Entries {
		if e.Kind != modelfile.KindWhisper {
			continue
		}
		d, ok := recs.windows[e.File]
		if !ok {
			d = &WindowDeclaration{ShortWindow: s.shortDefault, Source: WindowDefault}
		}
		if out.Windows == nil {
			out.Windows = map[string]*WindowDeclaration{}
		}
		out.Windows[e.File] = d
	}
	return out, nil
}

// Describe finds the folder's file name (already checked with
// modelfile.ValidName) and describes it against the embedded manifest: its
// absolute path and entry; modelfile.ErrNotFound when it is not there.
func (s *Service) Describe(name string) (string, modelfile.Entry, error) {
	path, err := filepath.Abs(filepath.Join(s.dir, name))
	if err != nil {
		return "", modelfile.Entry{}, err
	}
	man, err := Embedded()
	if err != nil {
		return "", modelfile.Entry{}, err
	}
	e, err := modelfile.Describe(path, man)
	if errors.Is(err, os.ErrNotExist) {
		return "", modelfile.Entry{}, fmt.Errorf("%w: %s", modelfile.ErrNotFound, name)
	}
	return path, e, err
}

// legacyTimingsDir is where replyd kept a file's timing before the store
// did: beside it, in a hidden folder of the models folder the listing skips.
func (s *Service) legacyTimingsDir() string { return filepath.Join(s.dir, ".timings") }

// migrateTimings moves the timings kept as files (legacyTimingsDir) into
// the store as this box's records, once: each file moved is removed, and
// the folder with the last. A file that cannot be read or parsed is left
// where it is, with a warning; it is no use to the listing either way.
func (s *Service) migrateTimings() {
	dir := s.legacyTimingsDir()
	des, err := os.ReadDir(dir)
	if err != nil {
		return // none: nothing to migrate
	}
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !de.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(p)
		var t struct {
			Timing
			ModTime time.Time `json:"mod_time"`
		}
		if err == nil {
			err = json.Unmarshal(b, &t)
		}
		if err == nil {
			t.Timing.ModTime = t.ModTime
			err = s.PutTiming(name, t.Timing)
		}
		if err != nil {
			s.log.Warn("a timing kept as a file could not be moved into the store", "file", p, "error", err.Error())
			continue
		}
		_ = os.Remove(p)
	}
	if err := os.Remove(dir); err == nil {
		s.log.Info("the model timings kept as files are in the store now", "dir", dir)
	}
}

// PutTiming stores t as this box's timing of the file name.
func (s *Service) PutTiming(name string, t Timing) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.store.PutModelRecord(store.ModelRecord{Node: s.node, File: name, What: store.ModelTiming,
		Bytes: t.Bytes, ModTime: t.ModTime, Body: b})
}

// putComparison stores the finished comparison c of the file name (of st
// when it began) as this box's record of the file.
func (s *Service) putComparison(name string, st os.FileInfo, c Comparison) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.store.PutModelRecord(store.ModelRecord{Node: s.node, File: name, What: store.ModelComparison,
		Bytes: st.Size(), ModTime: st.ModTime(), Body: b})
}

// records are this box's stored timings, comparisons and window
// declarations of the files still as they were measured (same size and
// modification time), by file name.
type records struct {
	timings     map[string]*Timing
	comparisons map[string]*Comparison
	windows     map[string]*WindowDeclaration
}

// records reads this box's records; stat gives a file's state now (nil:
// gone).
func (s *Service) records(stat func(name string) os.FileInfo) (records, error) {
	out := records{timings: map[string]*Timing{}, comparisons: map[string]*Comparison{}, windows: map[string]*WindowDeclaration{}}
	recs, err := s.store.ModelRecords(s.node)
	if err != nil {
		return out, err
	}
	for _, r := range recs {
		st := stat(r.File)
		if st == nil || st.Size() != r.Bytes || !st.ModTime().Equal(r.ModTime) {
			continue // gone or replaced since
		}
		switch r.What {
		case store.ModelTiming:
			var t Timing
			if json.Unmarshal(r.Body, &t) == nil {
				t.Bytes, t.ModTime = r.Bytes, r.ModTime
				out.timings[r.File] = &t
			}
		case store.ModelComparison:
			var c Comparison
			if json.Unmarshal(r.Body, &c) == nil {
				out.comparisons[r.File] = &c
			}
		case store.ModelWindow:
			if d, ok := windowRecord(r, st); ok {
				out.windows[r.File] = &d
			}
		}
	}
	return out, nil
}
