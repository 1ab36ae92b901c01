package shareddata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingDataSkipsAndCounts: without the data a test skips, loudly, and
// leaves its name in $REPLYD_SKIP_LOG for make test's last line; with
// REPLYD_REQUIRE_TESTDATA=1 (.ci/run) it is not skipped.
func TestMissingDataSkipsAndCounts(t *testing.T) {
	log := filepath.Join(t.TempDir(), "skipped")
	t.Setenv("REPLYD_TESTDATA", t.TempDir()) // exists, but holds no whisper/
	t.Setenv("REPLYD_SKIP_LOG", log)
	t.Setenv("REPLYD_REQUIRE_TESTDATA", "")
	for i := 0; i < 2; i++ {
		t.Run("conformance", func(t *testing.T) {
			Whisper(t)
			t.Error("Whisper returned without the data")
		})
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(b)); len(got) != 2 || !strings.HasPrefix(got[0], t.Name()+"/conformance") {
		t.Errorf("skip log %q, want the two subtests", got)
	}
	if Find() != "" {
		t.Errorf("Find() = %q for a folder without whisper/", Find())
	}
}
