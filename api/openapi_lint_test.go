package api

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/testutil"
)

// TestOpenAPIStrictLint runs Redocly's strict ruleset (recommended-strict:
// every rule of "recommended", warnings as errors) over the OpenAPI file as
// the server renders it, so every change to it is checked by `make test`.
// The findings kept on purpose are listed, with the reason, in
// openapi.lint-ignore.yaml. Redocly is pinned in tests/browser/package.json
// and installed by scripts/deps.sh; it runs offline (no telemetry, no update
// check). Without it the test skips and says so; with REPLYD_REQUIRE_TOOLS=1
// (make test) its absence fails.
func TestOpenAPIStrictLint(t *testing.T) {
	local, err := filepath.Abs("../tests/browser/node_modules/.bin/redocly")
	if err != nil {
		t.Fatal(err)
	}
	bin := testutil.Tool(t, "redocly", "the OpenAPI file", local)
	e := newEnv(t)
	rec := e.do(httptest.NewRequest("GET", "/openapi.yaml", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /openapi.yaml: %d", rec.Code)
	}
	dir := t.TempDir()
	doc := filepath.Join(dir, "openapi.yaml")
	if err := os.WriteFile(doc, rec.Body.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile("openapi.lint-ignore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".redocly.lint-ignore.yaml"), ignore, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "lint", "--extends=recommended-strict", "--format=stylish", doc)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint --extends=recommended-strict: %v\n%s", err, out)
	}
}
