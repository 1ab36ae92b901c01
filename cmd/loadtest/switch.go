package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// routeActivate is the admin's model switch, as reported.
const routeActivate = "POST /v1/admin/models/{name}/activate"

// switchModels are the language model files -switch-every alternates
// between: the demo model and a copy of it under another name (a
// different file, loaded anew at each switch).
var switchModels = [2]string{"llm-demo.gguf", "llm-demo-b.gguf"}

// copyDemoModel writes the second model of switchModels beside the first in
// the models folder dir.
func copyDemoModel(dir string) error {
	src, err := os.Open(filepath.Join(dir, switchModels[0]))
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, switchModels[1]))
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// switcher switches the server's language model every cfg.switchEvery until
// ctx ends, alternating between switchModels and between loading the new
// model beside the old one and unloading the old one first (swap: the
// requests meanwhile get 503 loading). Each answer is recorded under
// routeActivate; a switch refused as busy (409) is one, not a failure.
func switcher(ctx context.Context, cfg config, c *client, res *results) {
	modes := [2]string{"beside", "swap"}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.switchEvery):
		}
		name := switchModels[(n+1)%2]
		// A switch started is let finish: cutting it would count as no
		// response.
		o, body, err := c.admin(context.WithoutCancel(ctx), "POST", "/v1/admin/models/"+url.PathEscape(name)+"/activate",
			map[string]string{"mode": modes[n/2%2]})
		o.route = routeActivate
		if err == nil && o.status == 200 {
			res.mu.Lock()
			res.switches++
			res.mu.Unlock()
		} else if err == nil && o.status != 409 {
			res.mu.Lock()
			res.switchErrs = append(res.switchErrs, fmt.Sprintf("switch to %s: %d %s", name, o.status, strings.TrimSpace(string(body))))
			res.mu.Unlock()
		}
		res.add(o)
	}
}

// byModel reads which language model answered the run's inferences (the
// stats' by_model over the run's window): with -switch-every each answer
// must name one of switchModels, and both must have answered some.
func (c *client) byModel(ctx context.Context, res *results) {
	since := url.QueryEscape(res.started.Format(time.RFC3339))
	var st struct {
		ByModel []struct {
			Model      string `json:"model"`
			Inferences int    `json:"inferences"`
		} `json:"by_model"`
	}
	if res.byModelErr = c.getJSON(ctx, "/v1/admin/stats?since="+since, &st); res.byModelErr != nil {
		return
	}
	res.byModel = map[string]int{}
	for _, m := range st.ByModel {
		res.byModel[m.Model] += m.Inferences
	}
}

// switchProblems lists what makes a run with -switch-every fail: a switch
// answered other than 200 or 409 busy, an answer made by a model that is not
// one of switchModels (or by none: "" while the LLM answered), fewer answers
// by model than the answers received that ran the language model, or a
// model that never answered though a switch to it took place.
func (r *results) switchProblems() []string {
	var out []string
	out = append(out, r.switchErrs...)
	if r.byModelErr != nil {
		return append(out, "reading the stats' by_model after the run: "+r.byModelErr.Error())
	}
	total := 0
	for m, n := range r.byModel {
		total += n
		if !slices.Contains(switchModels[:], m) {
			out = append(out, fmt.Sprintf("%d answers counted for model %q, which is not one of %v", n, m, switchModels))
		}
	}
	if want := r.answered - r.noSpeech; total != want {
		out = append(out, fmt.Sprintf("%d answers counted by model, %d answers received that ran the language model", total, want))
	}
	if r.switches > 0 && r.byModel[switchModels[1]] == 0 {
		out = append(out, fmt.Sprintf("%d switches took place, yet %s answered nothing", r.switches, switchModels[1]))
	}
	if r.switches == 0 {
		out = append(out, "no switch of models took place during the run")
	}
	return out
}

// printSwitches writes the switches and the answers by model.
func (r *results) printSwitches(w io.Writer) {
	fmt.Fprintf(w, "model switches: %d", r.switches)
	if r.byModelErr == nil {
		var names []string
		for m := range r.byModel {
			names = append(names, m)
		}
		sort.Strings(names)
		var parts []string
		for _, m := range names {
			parts = append(parts, fmt.Sprintf("%s %d", m, r.byModel[m]))
		}
		fmt.Fprintf(w, "; answers by language model: %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// noSpeechAnswer reports whether a 200 answer of /v1/infer found no speech
// (no language model ran for it).
func noSpeechAnswer(body []byte) bool {
	var a struct {
		NoSpeech bool `json:"no_speech"`
	}
	return json.Unmarshal(body, &a) == nil && a.NoSpeech
}
