package bolt

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenInstallKeepsTheMarker: a new install creates the file and its
// marker; an install from before markers gains one; once it is there, a
// missing or emptied data file is refused (before, a 0-byte replyd.db was
// silently taken for a new install), and the refusal creates nothing.
func TestOpenInstallKeepsTheMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	openInstall := func() (Install, error) {
		db, inst, err := OpenInstall(path, Options{})
		if err == nil {
			Must(t, db.Close())
		}
		return inst, err
	}
	if inst, err := openInstall(); err != nil || inst != NewInstall {
		t.Fatalf("first OpenInstall = %v, %v; want NewInstall", inst, err)
	}
	b, err := os.ReadFile(MarkerPath(path))
	Must(t, err)
	if !strings.HasPrefix(string(b), markerText) {
		t.Errorf("marker = %q", b)
	}
	if inst, err := openInstall(); err != nil || inst != Existing {
		t.Fatalf("second OpenInstall = %v, %v; want Existing", inst, err)
	}
	Must(t, CheckInstall(path))

	Must(t, os.Truncate(path, 0))
	_, err = openInstall()
	wantDamaged(t, err, path, "empty (0 bytes), but this install has run before")
	if !strings.Contains(err.Error(), MarkerPath(path)) {
		t.Errorf("%v does not name the marker", err)
	}
	wantDamaged(t, CheckInstall(path), path, "empty (0 bytes), but this install has run before")

	Must(t, os.Remove(path))
	_, err = openInstall()
	wantDamaged(t, err, path, "missing, but this install has run before")
	wantDamaged(t, CheckInstall(path), path, "missing, but this install has run before")
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused open created %s: %v", path, err)
	}

	// Removing the marker is how an admin starts over on purpose.
	Must(t, os.Remove(MarkerPath(path)))
	if err := CheckInstall(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CheckInstall with neither file = %v, want ErrNotExist", err)
	}
	if inst, err := openInstall(); err != nil || inst != NewInstall {
		t.Fatalf("OpenInstall after the marker was removed = %v, %v; want NewInstall", inst, err)
	}
}

// TestOpenInstallUpgrade: a data file from before markers holding the
// admin key gains a marker at its next open and keeps its data.
func TestOpenInstallUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	db := MustOpenAt(t, path, Options{})
	Must(t, db.SetAdminKeyHash("admin-hash"))
	Must(t, db.Close())
	db, inst, err := OpenInstall(path, Options{})
	Must(t, err)
	defer db.Close()
	if inst != Upgraded {
		t.Errorf("OpenInstall = %v, want Upgraded", inst)
	}
	if h, err := db.AdminKeyHash(); err != nil || h != "admin-hash" {
		t.Errorf("AdminKeyHash = %q, %v", h, err)
	}
	if _, err := os.Stat(MarkerPath(path)); err != nil {
		t.Errorf("no marker after the upgrade: %v", err)
	}
}

// TestOpenInstallEmptyWithoutMarker: an empty file with no marker is
// refused too (bbolt would have made it an empty store).
func TestOpenInstallEmptyWithoutMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	Must(t, os.WriteFile(path, nil, 0o600))
	_, _, err := OpenInstall(path, Options{})
	wantDamaged(t, err, path, "empty (0 bytes)")
	if _, err := os.Stat(MarkerPath(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused open wrote the marker: %v", err)
	}
}
