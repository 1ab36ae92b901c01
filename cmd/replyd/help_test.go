package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestHelpListsEveryModelsSubcommand: `replyd help` names each subcommand
// that `replyd models` lists in its own usage (add and list were missing).
func TestHelpListsEveryModelsSubcommand(t *testing.T) {
	code, help := runCmd(t, nil, "help")
	if code != 0 {
		t.Fatalf("help exited %d", code)
	}
	_, msg := runCmd(t, nil, "models")
	subs := regexp.MustCompile("`replyd models (\\w+)").FindAllStringSubmatch(msg, -1)
	if len(subs) < 5 {
		t.Fatalf("replyd models names %d subcommands: %s", len(subs), msg)
	}
	for _, m := range subs {
		if !strings.Contains(help, "replyd models "+m[1]) {
			t.Errorf("replyd help does not list `replyd models %s`", m[1])
		}
	}
	if !strings.Contains(help, "3: damaged") {
		t.Errorf("replyd help does not give check's exit codes")
	}
}
