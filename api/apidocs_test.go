package api

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestEveryErrorCodeDocumented: each code the server can send is in the
// guide's error table and in the OpenAPI Error enum.
func TestEveryErrorCodeDocumented(t *testing.T) {
	e := newEnv(t)
	md := e.do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Enum []string `yaml:"enum"`
						} `yaml:"error"`
					} `yaml:"properties"`
				} `yaml:"Error"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(e.do(httptest.NewRequest("GET", "/openapi.yaml", nil)).Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas.Error.Properties.Error.Enum
	for code := range codeStatus {
		if !slices.Contains(enum, code) {
			t.Errorf("openapi.yaml's Error enum lacks %q", code)
		}
		switch code {
		case CodeCanceled, CodeMethodNotAllowed, CodeNotFound, CodeConflict, CodeOTPDeliveryFailed, CodeNotSupported:
			// Not answers to a tablet's /v1/infer call (not_supported: a
			// backup PostgreSQL makes with pg_dump): the OpenAPI file
			// documents them on their routes.
			continue
		}
		if !strings.Contains(md, "| `"+code+"` |") {
			t.Errorf("client.md's error table lacks %q", code)
		}
	}
}

// TestPromptBudgetDocumented: the guide states the combined budget of the
// prompt in tokens and characters when the server knows it, and says that
// retrying prompt_too_long unchanged fails again.
func TestPromptBudgetDocumented(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.PromptBudgetTokens = 4047 })
	md := e.do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	for _, want := range []string{
		"must fit in\n4047 tokens together, about 16188 characters of English text",
		"| System prompt, biography, persona, user_profile and last speaker message together | 4047 tokens (about 16188 characters of English) |",
		"| 400 | `prompt_too_long` |", "the same request fails again",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md lacks %q", want)
		}
	}
	yml := e.do(httptest.NewRequest("GET", "/openapi.yaml", nil)).Body.String()
	if !strings.Contains(yml, "(4047 tokens, about 16188 characters of English)") {
		t.Error("openapi.yaml does not state the prompt budget")
	}
	unknown := newEnv(t).do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	if !strings.Contains(unknown, "| the model's context |") {
		t.Error("client.md without a known budget does not say so")
	}
}
