package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// An empty or missing data file looks like a new install to bbolt, which
// would create an empty store: every key, tablet pairing and the admin key
// gone without a word. The marker beside the data file says that this
// install has started before, so that such a file is refused instead.

// MarkerPath returns the marker file that goes with the data file at path.
func MarkerPath(path string) string { return path + ".installed" }

// Install says what OpenInstall found.
type Install int

const (
	// Existing: the data file and its marker were there.
	Existing Install = iota
	// NewInstall: there was neither: the data file was created.
	NewInstall
	// Upgraded: the data file was there without a marker (an install from
	// before markers); the marker was written.
	Upgraded
)

// OpenInstall opens the data file of a replyd install at path for writing,
// as Open does, and keeps its marker: a missing or empty data file whose
// marker is there is refused with a *DamagedError (restore the backup)
// instead of being taken for a new install; the marker is written after
// the first successful open of a new install, and of an install that
// predates markers.
func OpenInstall(path string, opts Options) (*DB, Install, error) {
	marker := MarkerPath(path)
	since, hasMarker, err := readMarker(marker)
	if err != nil {
		return nil, Existing, err
	}
	fi, err := os.Stat(path)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return nil, Existing, fmt.Errorf("store: open %s: %w", path, describeIOError(err))
	}
	if hasMarker && (missing || fi.Size() == 0) {
		what := "it is missing"
		if !missing {
			what = "it is empty (0 bytes)"
		}
		return nil, Existing, &DamagedError{Path: path, Problem: fmt.Sprintf(
			"%s, but this install has run before (%s says so, since %s), so it is not a new install; "+
				"to start over as a new install on purpose, with every key lost, remove %s", what, marker, since, marker)}
	}
	if !hasMarker && !missing && fi.Size() == 0 {
		return nil, Existing, &DamagedError{Path: path, Problem: "it is empty (0 bytes) and holds no data; " +
			"if this is a new install whose first start was interrupted, delete it and start again"}
	}
	db, err := Open(path, opts)
	if err != nil {
		return nil, Existing, err
	}
	if hasMarker {
		return db, Existing, nil
	}
	if err := writeMarker(marker, db.now()); err != nil {
		_ = db.Close()
		return nil, Existing, err
	}
	if missing {
		return db, NewInstall, nil
	}
	return db, Upgraded, nil
}

// CheckInstall is OpenInstall's rule for a data file that is not to be
// opened for writing (`replyd check`): a *DamagedError when the marker is
// there and the data file is missing or empty, an error wrapping
// fs.ErrNotExist when neither is there, nil otherwise.
func CheckInstall(path string) error {
	marker := MarkerPath(path)
	since, hasMarker, err := readMarker(marker)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && hasMarker:
		return &DamagedError{Path: path, Problem: fmt.Sprintf("it is missing, but this install has run before (%s says so, since %s)", marker, since)}
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: %s does not exist and %s neither: replyd has not run with this data directory: %w", path, marker, err)
	case err != nil:
		return err
	case fi.Size() == 0 && hasMarker:
		return &DamagedError{Path: path, Problem: fmt.Sprintf("it is empty (0 bytes), but this install has run before (%s says so, since %s)", marker, since)}
	}
	return nil
}

// markerText starts every marker file.
const markerText = "replyd: this install started for the first time at "

// readMarker returns when the marker says the install first started, and
// whether it is there.
func readMarker(marker string) (since string, ok bool, err error) {
	b, err := os.ReadFile(marker)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: reading %s: %w", marker, describeIOError(err))
	}
	line, _, _ := strings.Cut(string(b), "\n")
	since = strings.TrimPrefix(line, markerText)
	if since == line || since == "" {
		since = "an unknown date" // written by hand, or damaged: still a marker
	}
	return since, true, nil
}

// writeMarker writes the marker atomically (a copy renamed over it, the
// directory synced).
func writeMarker(marker string, now time.Time) error {
	text := markerText + now.UTC().Format(time.RFC3339) + "\n" +
		"It tells replyd that the data file beside it must exist: an empty or missing one is refused, not taken for a new install.\n" +
		"Keep it with the data file; do not copy it to another box.\n"
	dir := filepath.Dir(marker)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(marker)+"-*")
	if err != nil {
		return fmt.Errorf("store: writing %s: %w", marker, describeIOError(err))
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(text)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), marker)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("store: writing %s: %w", marker, describeIOError(err))
	}
	return nil
}
