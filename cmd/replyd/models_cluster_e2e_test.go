package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/internal/replydproc"
)

// TestModelsSwitchTwoBoxes runs two real boxes on one PostgreSQL, each with
// its own models folder. Box A switches its language model; box B keeps its
// own, lists A's choice beside its own files, and has nothing to roll back.
// After both restart, A loads its choice and B its configured model.
func TestModelsSwitchTwoBoxes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	pg := pgtest.Start(t)
	url := pg.NewDatabase(t)
	const adminKey = "e2e-admin-key-two-boxes-0123456789"
	box := func(name string) map[string]string {
		env, _ := modelsFolderEnv(t, adminKey)
		env["REPLYD_NODE_NAME"] = name
		env["REPLYD_STORE_URL"] = url
		return env
	}
	envA, envB := box("box-a"), box("box-b")
	writeCandidate(t, modelsDir(envA["REPLYD_DATA_DIR"]), 0xb0a)
	a := startReplyd(t, envA)
	b := startReplyd(t, envB)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}

	a.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/candidate.gguf/activate", Header: admin, Timeout: 5 * time.Minute}, 200)
	// B has no such file, and never switched.
	b.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/candidate.gguf/activate", Header: admin}, 404)
	b.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/llm/rollback", Header: admin}, 409)

	type listing struct {
		Node   string
		Models []struct {
			File   string
			Active bool
		}
		Boxes []struct{ Node, Kind, Model, Previous string }
	}
	list := func(p interface {
		Must(replydproc.Request, int) []byte
	}) listing {
		t.Helper()
		var l listing
		if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	check := func(when string) {
		t.Helper()
		la, lb := list(a), list(b)
		wantBox := struct{ Node, Kind, Model, Previous string }{"box-a", "llm", "candidate.gguf", "llm-demo.gguf"}
		for _, l := range []listing{la, lb} {
			if len(l.Boxes) != 1 || l.Boxes[0] != wantBox {
				t.Errorf("%s: %s lists the boxes' choices %+v, want A's alone", when, l.Node, l.Boxes)
			}
		}
		activeA, activeB := map[string]bool{}, map[string]bool{}
		for _, m := range la.Models {
			activeA[m.File] = m.Active
		}
		for _, m := range lb.Models {
			activeB[m.File] = m.Active
		}
		if !activeA["candidate.gguf"] || activeA["llm-demo.gguf"] || len(lb.Models) != 2 || !activeB["llm-demo.gguf"] {
			t.Errorf("%s: A's models %+v, B's %+v", when, la.Models, lb.Models)
		}
	}
	check("after A's switch")
	a.Stop()
	b.Stop()
	a = startReplyd(t, envA)
	b = startReplyd(t, envB)
	check("after both restarted")
}
