package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOptionTable keeps the three statements of the options agreeing:
// options() (the code), `replyd serve --help` and the configuration table
// of docs/configuration.md. Every option has one table row naming its
// environment variable, its flag and its documented default; the table has
// no other rows; --help names every flag with its variable and default.
func TestOptionTable(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ flag, def string }
	rows := map[string]row{}
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| env | flag | default |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("docs/configuration.md: a table row with %d cells: %s", len(cells), line)
		}
		env := strings.TrimSpace(cells[1])
		if _, dup := rows[env]; dup {
			t.Errorf("docs/configuration.md lists %s twice", env)
		}
		rows[env] = row{flag: strings.TrimSpace(cells[2]), def: strings.TrimSpace(cells[3])}
	}
	if len(rows) == 0 {
		t.Fatal("docs/configuration.md has no configuration table")
	}

	var help bytes.Buffer
	if _, _, err := LoadConfig("serve", []string{"--help"}, envMap(nil), &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, o := range options() {
		r, ok := rows[o.env]
		if !ok {
			t.Errorf("docs/configuration.md's table lacks %s (--%s)", o.env, o.flag)
			continue
		}
		delete(rows, o.env)
		if r.flag != "--"+o.flag {
			t.Errorf("docs/configuration.md: %s has flag %q, the code --%s", o.env, r.flag, o.flag)
		}
		if r.def != o.documented() {
			t.Errorf("docs/configuration.md: %s defaults to %q, the code to %q", o.env, r.def, o.documented())
		}
		want := fmt.Sprintf("(env %s, default %q", o.env, o.documented())
		if !strings.Contains(help.String(), "-"+o.flag+" value") || !strings.Contains(help.String(), want) {
			t.Errorf("--help does not list -%s with %s", o.flag, want)
		}
	}
	for env := range rows {
		t.Errorf("docs/configuration.md lists %s, which is no option", env)
	}
}
