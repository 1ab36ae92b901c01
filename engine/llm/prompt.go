package llm

import (
	"errors"
	"strings"

	"github.com/replyd/replyd/engine"
)

// defaultSystemPrompt is used when the store has no system prompt.
const defaultSystemPrompt = "You help a person who uses an AAC device to take part in a conversation."

// replyInstruction closes the system message: it asks for one short reply in
// the AAC user's voice. The assistant turns of the chat are the AAC user's.
const replyInstruction = "You speak as the AAC user: your turns in this chat are theirs. " +
	"Write the next thing they would say: one short reply of a few words, in the first person, " +
	"on one line, with no quotes and no explanation."

// languageNames spells out language codes for the prompt's language note:
// the English name, and the language's own name where it differs, for
// every language the pages ship (en, de, fr, es, it, nl, pt, pl, sv, uk,
// ar) and the other common ones. Other codes are passed through as they
// are.
var languageNames = map[string]string{
	"en": "English", "de": "German (Deutsch)", "fr": "French (français)", "es": "Spanish (español)",
	"it": "Italian (italiano)", "nl": "Dutch (Nederlands)", "pt": "Portuguese (português)",
	"pl": "Polish (polski)", "sv": "Swedish (svenska)", "uk": "Ukrainian (українська)", "ar": "Arabic (العربية)",
	"da": "Danish (dansk)", "nb": "Norwegian (norsk)", "nn": "Norwegian (norsk)", "no": "Norwegian (norsk)",
	"fi": "Finnish (suomi)", "cs": "Czech (čeština)", "sk": "Slovak (slovenčina)", "sl": "Slovenian (slovenščina)",
	"hr": "Croatian (hrvatski)", "sr": "Serbian (српски)", "bg": "Bulgarian (български)", "ro": "Romanian (română)",
	"hu": "Hungarian (magyar)", "el": "Greek (Ελληνικά)", "ru": "Russian (русский)", "be": "Belarusian (беларуская)",
	"lt": "Lithuanian (lietuvių)", "lv": "Latvian (latviešu)", "et": "Estonian (eesti)", "ca": "Catalan (català)",
	"eu": "Basque (euskara)", "gl": "Galician (galego)", "ga": "Irish (Gaeilge)", "cy": "Welsh (Cymraeg)",
	"is": "Icelandic (íslenska)", "tr": "Turkish (Türkçe)", "he": "Hebrew (עברית)", "fa": "Persian (فارسی)",
	"ur": "Urdu (اردو)", "hi": "Hindi (हिन्दी)", "bn": "Bengali (বাংলা)", "ta": "Tamil (தமிழ்)",
	"ja": "Japanese (日本語)", "zh": "Chinese (中文)", "ko": "Korean (한국어)", "vi": "Vietnamese (Tiếng Việt)",
	"th": "Thai (ไทย)", "id": "Indonesian (Bahasa Indonesia)", "ms": "Malay (Bahasa Melayu)",
	"sw": "Swahili (Kiswahili)", "af": "Afrikaans",
}

// languageName returns the name of a BCP 47 or ISO 639-1 code for the
// prompt, or the code itself when it is not a common one.
func languageName(code string) string {
	base := strings.ToLower(strings.SplitN(strings.ReplaceAll(code, "_", "-"), "-", 2)[0])
	if n, ok := languageNames[base]; ok {
		return n
	}
	return code
}

// languageNote is the instruction that asks for replies in lang; "" when
// lang is empty or unknown (engine.LanguageUnknown).
func languageNote(lang string) string {
	lang = strings.TrimSpace(lang)
	if lang == "" || lang == engine.LanguageUnknown {
		return ""
	}
	return "[Reply in " + languageName(lang) + ".]"
}

// withLanguage puts the language note after the partner's current turn
// (the last "user" turn), or in a turn of its own at the end of the
// dialog when it has none. Either way the note is in the tail of the
// prompt (see headOf), after everything the dialog prefix cache keeps: a
// change of reply language re-evaluates only the tail, and the turn after
// this one finds this one's cached up to the note. The system message
// never carries it.
func withLanguage(turns []turn, lang string) []turn {
	note := languageNote(lang)
	if note == "" {
		return turns
	}
	out := append([]turn(nil), turns...)
	if i := lastSpeaker(out); i >= 0 {
		out[i].content += "\n" + note
		return out
	}
	return append(out, turn{role: "user", content: note})
}

// systemMessage renders the system prompt, then what the payload says about
// the AAC user, then the reply instruction. The reply language is not in
// it: see withLanguage.
func systemMessage(req engine.GenerateRequest) string {
	var b strings.Builder
	sp := strings.TrimSpace(req.SystemPrompt)
	if sp == "" {
		sp = defaultSystemPrompt
	}
	b.WriteString(sp)
	p := req.Profile
	field := func(label, v string) {
		if v = strings.TrimSpace(v); v != "" {
			b.WriteString("\n")
			b.WriteString(label)
			b.WriteString(": ")
			b.WriteString(v)
		}
	}
	if strings.TrimSpace(p.Biography+p.Persona+p.UserProfile) != "" {
		b.WriteString("\n\nAbout the AAC user:")
		field("Biography", p.Biography)
		field("Persona", p.Persona)
		field("Profile", p.UserProfile)
	}
	b.WriteString("\n\n")
	b.WriteString(replyInstruction)
	return b.String()
}

// PromptText renders req's whole prompt with the model's chat template as
// Generate renders it before fitting it into the context (no turn dropped,
// no remembered examples, no sampled reply tokens spliced in): the words
// the model is asked, for tests and for reading.
func (e *Engine) PromptText(req engine.GenerateRequest) (string, error) {
	return applyTemplate(e.tmpl, chatFor(systemMessage(req), withLanguage(dialogTurns(req.Messages), req.ReplyLanguage)), true)
}

// turn is one dialog turn in chat form.
type turn struct {
	role    string // "user" (the speaker) or "assistant" (the AAC user)
	content string
	tokens  []int // the sampled tokens of an offered reply (withSampled), or nil
	msgs    int   // the request's messages joined into this turn
}

// dialogTurns maps the dialog to chat turns: the speaker is the chat's user
// and the AAC user is the assistant, whose next turn the model writes. Empty
// messages are skipped and consecutive messages of one role are joined with
// a newline, because several templates require alternating roles.
func dialogTurns(msgs []engine.Message) []turn {
	var out []turn
	for _, m := range msgs {
		c := strings.TrimSpace(m.Content)
		if c == "" {
			continue
		}
		role := "user"
		if m.Role == engine.RoleDisabledPerson {
			role = "assistant"
		}
		if n := len(out); n > 0 && out[n-1].role == role {
			out[n-1].content += "\n" + c
			out[n-1].msgs++
			continue
		}
		out = append(out, turn{role: role, content: c, msgs: 1})
	}
	return out
}

// chatFor assembles the system message and turns into template messages.
func chatFor(system string, turns []turn) []chatMessage {
	msgs := make([]chatMessage, 0, len(turns)+1)
	msgs = append(msgs, chatMessage{Role: "system", Content: system})
	for _, t := range turns {
		msgs = append(msgs, chatMessage{Role: t.role, Content: t.content, tokens: t.tokens})
	}
	return msgs
}

// ExampleTokenBudget is the most prompt tokens a request's remembered
// examples (GenerateRequest.Examples) may add: with them the dialog is
// fitted into the context less this budget, so the prompt never overflows,
// and examples are left out, least similar first, until they fit in it.
const ExampleTokenBudget = 64

// exampleFits are the ways promptTokens tries to fit the examples in
// ExampleTokenBudget, in order: as many examples as possible, each side cut
// to at most chars characters; one example cut shorter and shorter rather
// than none.
var exampleFits = []struct{ n, chars int }{{3, 100}, {2, 100}, {1, 100}, {1, 50}, {1, 25}}

// examplesNote renders the examples as one bracketed note in the chat,
// each side cut to chars characters.
func examplesNote(ex []engine.Example, chars int) string {
	var b strings.Builder
	b.WriteString("[Your earlier replies to similar words:")
	for _, e := range ex {
		b.WriteString(` "`)
		b.WriteString(shorten(e.Partner, chars))
		b.WriteString(`" → "`)
		b.WriteString(shorten(e.Reply, chars))
		b.WriteString(`";`)
	}
	b.WriteString("]\n")
	return b.String()
}

// shorten puts s on one line and cuts it to max characters, at a word
// boundary when there is one in its second half.
func shorten(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	cut := string(r[:max])
	if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	}
	return cut + "…"
}

// withExamples returns a copy of msgs with note put at the start of the
// last user message, the partner's current turn. That is the one place the
// examples go: after the system message and the earlier turns, which the
// dialog prefix cache keeps (and which may be evaluated before the
// partner's turn is known), and just before the words they are similar to.
func withExamples(msgs []chatMessage, note string) []chatMessage {
	out := append([]chatMessage(nil), msgs...)
	for i := len(out) - 1; i > 0; i-- {
		if out[i].Role == "user" {
			out[i].Content = note + out[i].Content
			return out
		}
	}
	return out
}

// errPromptTooLong is returned when even the system prompt and the last
// speaker turn alone exceed the token budget.
var errPromptTooLong = errors.New("the system prompt and the last speaker turn do not fit in the context")

// lastSpeaker returns the index of the last speaker turn, -1 for none.
func lastSpeaker(turns []turn) int {
	last := -1
	for i, t := range turns {
		if t.role == "user" {
			last = i
		}
	}
	return last
}

// fitTurns drops the oldest turns until fits accepts the chat, never the
// system message and never turn keep (-1: any turn may go). It returns the
// chat that fits and how many turns were dropped.
func fitTurns(system string, turns []turn, keep int, fits func([]chatMessage) (bool, error)) ([]chatMessage, int, error) {
	dropped := 0
	for {
		msgs := chatFor(system, turns)
		ok, err := fits(msgs)
		if err != nil {
			return nil, dropped, err
		}
		if ok {
			return msgs, dropped, nil
		}
		// Drop the oldest turn that is not the kept one.
		i := 0
		if keep == 0 {
			i = 1
		}
		if i >= len(turns) {
			return nil, dropped, errPromptTooLong
		}
		turns = append(turns[:i:i], turns[i+1:]...)
		if keep > i {
			keep--
		}
		dropped++
	}
}

// The prompt is split where a recording's transcript arrives. The head is
// the system message and the turns before the partner's current turn (the
// last speaker turn): Prefill evaluates it while the recording is being
// transcribed, and the next turn of the dialog finds it cached. The tail is
// the current turn, any turns after it and the opening of the reply. Remembered
// examples of the user's earlier replies belong at the start of the tail,
// after the cached head and just before the current turn, so that they
// change nothing the cache holds.

// headOf returns the messages of the head of a chat: the system message and
// the turns before the last "user" message.
func headOf(msgs []chatMessage) []chatMessage {
	for i := len(msgs) - 1; i > 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[:i]
		}
	}
	return msgs
}
