package engine_test

import (
	"os"
	"testing"
)

var tmpRoot string

// tempDir returns a directory for the demo models shared by the tests of
// this package; TestMain removes it.
func tempDir() (string, error) {
	if tmpRoot == "" {
		d, err := os.MkdirTemp("", "replyd-engine-test-")
		if err != nil {
			return "", err
		}
		tmpRoot = d
	}
	return tmpRoot, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}
