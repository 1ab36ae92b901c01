package web

import (
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The catalogs' contract (app/i18n/README.md): every shipped language has a
// catalog with exactly English's keys, the same placeholders, the plural
// forms its language needs, and every key the pages use exists in English.

// catalog is one language's file: a key maps to a string or to plural
// forms ({"one": ..., "other": ...}).
type catalog map[string]json.RawMessage

func readCatalog(t *testing.T, lang string) catalog {
	t.Helper()
	b, err := fs.ReadFile(AppFS(), "i18n/"+lang+".json")
	if err != nil {
		t.Fatalf("catalog %s: %v", lang, err)
	}
	var c catalog
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("catalog %s: %v", lang, err)
	}
	return c
}

// forms returns a value's plural forms ("" for a plain string).
func forms(t *testing.T, lang, key string, raw json.RawMessage) map[string]string {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return map[string]string{"": s}
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Errorf("%s: %s is neither a string nor plural forms: %v", lang, key, err)
		return nil
	}
	return m
}

// shipped reads LANGS from i18n.js, the list the pages offer.
func shipped(t *testing.T) []string {
	t.Helper()
	b, err := fs.ReadFile(AppFS(), "i18n/i18n.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`LANGS = Object\.freeze\(\[([^\]]*)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("i18n.js has no LANGS")
	}
	var langs []string
	for _, q := range regexp.MustCompile(`'([a-z]+)'`).FindAllSubmatch(m[1], -1) {
		langs = append(langs, string(q[1]))
	}
	return langs
}

// pluralNeeds are the CLDR plural categories each shipped language
// distinguishes for whole numbers, besides "other" (Intl.PluralRules).
var pluralNeeds = map[string][]string{
	"en": {"one"}, "de": {"one"}, "fr": {"one"}, "es": {"one"}, "it": {"one"}, "nl": {"one"},
	"pt": {"one"}, "sv": {"one"}, "pl": {"one", "few", "many"}, "uk": {"one", "few", "many"},
	"ar": {"zero", "one", "two", "few", "many"},
}

var placeholder = regexp.MustCompile(`\{(\w+)\}`)

func placeholders(s string) []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out
}

func TestCatalogsComplete(t *testing.T) {
	langs := shipped(t)
	if len(langs) < 11 {
		t.Fatalf("LANGS = %v: fewer than the 11 the issue asks for", langs)
	}
	files, err := fs.Glob(AppFS(), "i18n/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if l := strings.TrimSuffix(path.Base(f), ".json"); !slices.Contains(langs, l) {
			t.Errorf("catalog %s is not in LANGS: the pages never offer it", f)
		}
	}
	en := readCatalog(t, "en")
	for _, lang := range langs {
		c := readCatalog(t, lang)
		var meta struct{ Name, Dir string }
		if err := json.Unmarshal(c["_meta"], &meta); err != nil || meta.Name == "" || (meta.Dir != "ltr" && meta.Dir != "rtl") {
			t.Errorf("%s: _meta needs a name and dir ltr or rtl, got %s", lang, c["_meta"])
		}
		for key, raw := range en {
			if key == "_meta" {
				continue
			}
			tr, ok := c[key]
			if !ok {
				t.Errorf("%s: key %q is missing (English: %s)", lang, key, raw)
				continue
			}
			ef, tf := forms(t, "en", key, raw), forms(t, lang, key, tr)
			if ef == nil || tf == nil {
				continue
			}
			want := placeholders(strings.Join(mapValues(ef), " "))
			if _, plain := ef[""]; plain {
				if _, ok := tf[""]; !ok {
					t.Errorf("%s: %q is plural forms, English has a string", lang, key)
					continue
				}
			} else {
				if _, ok := tf["other"]; !ok {
					t.Errorf("%s: %q has no \"other\" form", lang, key)
					continue
				}
				for _, need := range pluralNeeds[lang] {
					if _, ok := tf[need]; !ok {
						t.Errorf("%s: %q lacks the plural form %q", lang, key, need)
					}
				}
			}
			for form, s := range tf {
				if strings.TrimSpace(s) == "" && strings.TrimSpace(ef[form]) != "" {
					t.Errorf("%s: %q is empty", lang, key)
				}
				got := placeholders(s)
				// "other" (or the plain string) carries every value; a
				// form such as "one" may say the number in words.
				if form == "" || form == "other" {
					if !slices.Equal(got, want) {
						t.Errorf("%s: %q has placeholders %v, English %v", lang, key, got, want)
					}
				} else {
					for _, p := range got {
						if !slices.Contains(want, p) {
							t.Errorf("%s: %q (%s) has placeholder {%s}, which English does not", lang, key, form, p)
						}
					}
				}
				if strings.Count(s, "**")%2 != 0 {
					t.Errorf("%s: %q has an unclosed ** (bold)", lang, key)
				}
			}
		}
		for key := range c {
			if _, ok := en[key]; !ok {
				t.Errorf("%s: key %q is not in English (a leftover or a typo)", lang, key)
			}
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// keyUses are the ways the pages name a catalog key: t('key') or
// msg('key') in scripts, s('name') in strings.js (spell.name), and
// data-i18n*="key" in the HTML.
var keyUses = []*regexp.Regexp{
	regexp.MustCompile(`\b(?:t|msg)\(\s*'([a-z][\w.-]*)'`),
	regexp.MustCompile(`\bdata-i18n(?:-[a-z-]+)?="([^"]+)"`),
	regexp.MustCompile(`\b(?:engineNames|roles|stages)\b[^;]*`), // tables of keys, checked below
}

var tableKey = regexp.MustCompile(`'(admin\.[\w.]+)'`)

var (
	importsI18n = regexp.MustCompile(`import \{([^}]*)\} from '[^']*i18n\.js'`)
	shadowsT    = regexp.MustCompile(`\b(?:const|let|var)\s+t\b|\(\s*t\s*[,)]|[(,]\s*t\s*\)\s*=>|\bt\s*=>`)
)

func TestKeysUsedAreInEnglish(t *testing.T) {
	en := readCatalog(t, "en")
	used := 0
	for _, page := range []fs.FS{AppFS(), AdminFS()} {
		err := fs.WalkDir(page, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".html")) {
				return err
			}
			b, err := fs.ReadFile(page, p)
			if err != nil {
				return err
			}
			src := string(b)
			// A local t hides the catalog's t(): the page would throw "t is
			// not a function" where it means a string.
			if importsPlainT(src) {
				if m := shadowsT.FindString(src); m != "" {
					t.Errorf("%s imports t() from the catalogs and declares a local t (%q)", p, m)
				}
			}
			var keys []string
			for _, m := range keyUses[0].FindAllStringSubmatch(src, -1) {
				keys = append(keys, m[1])
			}
			for _, m := range keyUses[1].FindAllStringSubmatch(src, -1) {
				keys = append(keys, m[1])
			}
			for _, tbl := range keyUses[2].FindAllString(src, -1) {
				for _, m := range tableKey.FindAllStringSubmatch(tbl, -1) {
					keys = append(keys, m[1])
				}
			}
			if path.Base(p) == "strings.js" {
				for _, m := range regexp.MustCompile(`\bs\('(\w+)'\)`).FindAllStringSubmatch(src, -1) {
					keys = append(keys, "spell."+m[1])
				}
			}
			for _, k := range keys {
				used++
				if _, ok := en[k]; !ok {
					t.Errorf("%s uses key %q, which en.json lacks", p, k)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if used < 300 {
		t.Errorf("found %d key uses: the patterns no longer match how the pages call t()", used)
	}
}

// importsPlainT reports whether src imports t from i18n.js under its own
// name (not "t as msg").
func importsPlainT(src string) bool {
	for _, m := range importsI18n.FindAllStringSubmatch(src, -1) {
		for _, name := range strings.Split(m[1], ",") {
			if strings.TrimSpace(name) == "t" {
				return true
			}
		}
	}
	return false
}

// Every error code the API sends has a message of its own: the pages show
// the catalog's text for the code, never the API's English message.
func TestEveryErrorCodeHasAMessage(t *testing.T) {
	b, err := os.ReadFile("../errors.go")
	if err != nil {
		t.Fatal(err)
	}
	en := readCatalog(t, "en")
	codes := regexp.MustCompile(`(?m)^\s*Code\w+\s*=\s*"([a-z_]+)"`).FindAllStringSubmatch(string(b), -1)
	if len(codes) < 20 {
		t.Fatalf("found %d error codes in api/errors.go: the pattern no longer matches", len(codes))
	}
	for _, m := range codes {
		if _, ok := en["error."+m[1]]; !ok {
			t.Errorf("en.json has no message for the API's error code %q (key error.%s)", m[1], m[1])
		}
	}
}

// labelledControl finds a control the pages draw with an accessible name
// (aria-label) beside its visible text, both from the catalogs:
// h('button', {'aria-label': t('K1', ...), text: t('K2')}).
var labelledControl = regexp.MustCompile(`'aria-label': t\('([\w.]+)'(?:, \{[^}]*\})?\), text: t\('([\w.]+)'\)`)

// TestAccessibleNamesHoldVisibleText: in every language, a control's
// accessible name contains its visible text (WCAG 2.5.3, axe's
// label-content-name-mismatch), so that a voice-control user who says
// what they see ("Remove") reaches it. uk's "Видалити {file}" on a button
// reading "Прибрати" failed axe in the Models view.
func TestAccessibleNamesHoldVisibleText(t *testing.T) {
	type pair struct{ name, text, file string }
	var pairs []pair
	err := fs.WalkDir(AdminFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := fs.ReadFile(AdminFS(), p)
		if err != nil {
			return err
		}
		for _, m := range labelledControl.FindAllStringSubmatch(string(b), -1) {
			pairs = append(pairs, pair{m[1], m[2], p})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) < 5 {
		t.Fatalf("found %d labelled controls in the admin page, want the Models and Users views' (5 or more)", len(pairs))
	}
	for _, lang := range shipped(t) {
		c := readCatalog(t, lang)
		str := func(k string) string {
			var s string
			_ = json.Unmarshal(c[k], &s)
			return s
		}
		for _, p := range pairs {
			name, text := str(p.name), str(p.text)
			if text != "" && !containsWords(name, text) {
				t.Errorf("%s: %s (%s) %q does not contain the visible %s %q", lang, p.name, p.file, name, p.text, text)
			}
		}
	}
}

// containsWords reports whether text's words, in order, are words of name
// (case aside): axe reads es's "Devolver ..." as not naming "Volver".
func containsWords(name, text string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r) })
	}
	n, w := split(name), split(text)
	for i := 0; i+len(w) <= len(n); i++ {
		if slices.Equal(n[i:i+len(w)], w) {
			return true
		}
	}
	return false
}
