package llm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/replyd/replyd/engine"
)

// shippedLanguages are the languages the conversation and admin pages
// ship, in the order docs/languages.md lists them.
var shippedLanguages = []string{"en", "de", "fr", "es", "it", "nl", "pt", "pl", "sv", "uk", "ar"}

// TestLanguageTokenCost measures, with Qwen2.5's real tokenizer (the one
// the synthetic Qwen2.5 models and the real ones share), what the same
// 8-turn dialog (testdata/dialog_languages.json) costs in prompt tokens in
// every shipped language, and compares the table with
// testdata/language_tokens.golden, the figures docs/languages.md quotes.
// Regenerate it with
//
//	go test ./engine/llm -run TestLanguageTokenCost -update
//
// "dialog" counts the tokens of the eight turns' words alone; "a turn" is
// their mean; "prompt" is the whole prompt the model evaluates on a cold
// start (the default system prompt in English, the chat template's markers,
// the dialog, the language note).
func TestLanguageTokenCost(t *testing.T) {
	e, err := Open(Options{ModelPath: qwenVocabModel(t), MaxReplyTokens: 8, PrefixCacheMiB: 1, ContextPerSeq: 2048, MaxCandidates: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b, err := os.ReadFile(filepath.Join("testdata", "dialog_languages.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dialogs map[string]json.RawMessage
	if err := json.Unmarshal(b, &dialogs); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| language | characters | dialog tokens | tokens a turn | × English | prompt tokens |\n")
	fmt.Fprintf(&out, "|---|---:|---:|---:|---:|---:|\n")
	var english int
	for _, lang := range shippedLanguages {
		var turns []string
		if err := json.Unmarshal(dialogs[lang], &turns); err != nil || len(turns) != 8 {
			t.Fatalf("%s: %d turns, %v; want the 8-turn dialog", lang, len(turns), err)
		}
		req := engine.GenerateRequest{ReplyLanguage: lang}
		chars, words := 0, 0
		for i, text := range turns {
			role := engine.RoleDisabledPerson
			if i%2 == 1 {
				role = engine.RoleSpeaker
			}
			req.Messages = append(req.Messages, engine.Message{Role: role, Content: text})
			toks, err := e.model.Tokenize(text, false, false)
			if err != nil {
				t.Fatal(err)
			}
			chars += utf8.RuneCountInString(text)
			words += len(toks)
		}
		if lang == "en" {
			english = words
		}
		text, err := e.PromptText(req)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := e.model.Tokenize(text, true, true)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "| %s %s | %d | %d | %.1f | %.2f | %d |\n", lang, strings.SplitN(languageName(lang), " ", 2)[0],
			chars, words, float64(words)/8, float64(words)/float64(english), len(prompt))
	}
	checkGolden(t, "language_tokens.golden", out.String())
	t.Logf("\n%s", out.String())
}
