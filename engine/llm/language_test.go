package llm

import (
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
)

// TestReplyLanguageKeepsTheCache: the reply language is asked for after
// the dialog's cached head, never in the system message, so a request that
// changes only the reply language finds the whole head (system message and
// earlier turns) in the dialog prefix cache and evaluates only its tail.
func TestReplyLanguageKeepsTheCache(t *testing.T) {
	e := openDemo(t, Options{ContextPerSeq: 1024, Threads: 1, MaxCandidates: 2, MaxReplyTokens: 4, Seed: 5})
	de := request(1, 3)
	de.Messages = dialog(7)
	de.DialogID = "d-language"
	de.ReplyLanguage = "de"
	fr := de
	fr.ReplyLanguage = "fr"
	if s := systemMessage(de); s != systemMessage(fr) || strings.Contains(s, "German") {
		t.Fatalf("the system message depends on the reply language:\n%s", s)
	}
	head, err := e.headTokens(de)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := e.headTokens(fr); len(h) != len(head) || commonPrefix(h, head) != len(head) {
		t.Fatal("the head of the prompt changes with the reply language")
	}
	deTokens, err := e.promptTokens(de, &engine.Generation{})
	if err != nil {
		t.Fatal(err)
	}
	frTokens, err := e.promptTokens(fr, &engine.Generation{})
	if err != nil {
		t.Fatal(err)
	}
	common := commonPrefix(deTokens, frTokens)
	if common < len(head) || common == len(frTokens) {
		t.Fatalf("German and French prompts share %d tokens; the head is %d of %d", common, len(head), len(frTokens))
	}
	mustGenerate(t, e, de)
	g := mustGenerate(t, e, fr)
	if g.CachedTokens < len(head) || g.PromptTokens != len(frTokens) {
		t.Errorf("after the German request the French one reused %d of %d prompt tokens; the head is %d", g.CachedTokens, g.PromptTokens, len(head))
	}
}

// TestLanguageNote: the note names the language in English and in its own
// words, goes after the partner's current turn (or in a turn of its own
// when the dialog has none), and is left out when the language is unknown.
func TestLanguageNote(t *testing.T) {
	// Every language the pages ship has a name.
	for _, code := range []string{"en", "de", "fr", "es", "it", "nl", "pt", "pl", "sv", "uk", "ar"} {
		if n := languageName(code); n == code || n == "" {
			t.Errorf("no name for %s", code)
		}
	}
	for code, want := range map[string]string{"de-AT": "[Reply in German (Deutsch).]", "pt_BR": "[Reply in Portuguese (português).]",
		"ar": "[Reply in Arabic (العربية).]", "gsw": "[Reply in gsw.]", "": "", engine.LanguageUnknown: ""} {
		if got := languageNote(code); got != want {
			t.Errorf("languageNote(%q) = %q, want %q", code, got, want)
		}
	}
	turns := dialogTurns([]engine.Message{
		{Role: engine.RoleSpeaker, Content: "Tea?"},
		{Role: engine.RoleDisabledPerson, Content: "Yes."},
	})
	got := withLanguage(turns, "de")
	if got[0].content != "Tea?\n[Reply in German (Deutsch).]" || got[1].content != "Yes." || turns[0].content != "Tea?" {
		t.Errorf("with a partner turn: %+v (from %+v)", got, turns)
	}
	only := dialogTurns([]engine.Message{{Role: engine.RoleDisabledPerson, Content: "Hello."}})
	got = withLanguage(only, "de")
	if len(got) != 2 || got[1].role != "user" || got[1].content != "[Reply in German (Deutsch).]" {
		t.Errorf("without a partner turn: %+v", got)
	}
	if got := withLanguage(turns, ""); len(got) != 2 || got[0].content != "Tea?" {
		t.Errorf("without a language: %+v", got)
	}
}
