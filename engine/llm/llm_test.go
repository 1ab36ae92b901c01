package llm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// demoPath is the demo model written once for the package's tests.
var demoPath = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "replyd-llm-test")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "llm-demo.gguf")
	return p, WriteDemoModel(p)
})

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if p, err := demoPath(); err == nil {
		os.RemoveAll(filepath.Dir(p))
	}
	os.Exit(code)
}

// openDemo opens an engine on the demo model. Tests that do not Close it
// leave it to the process's end; the demo model's engines are tiny.
func openDemo(tb testing.TB, opts Options) *Engine {
	tb.Helper()
	p, err := demoPath()
	if err != nil {
		tb.Fatal(err)
	}
	opts.ModelPath = p
	opts.Demo = true
	if opts.PrefixCacheMiB == 0 {
		opts.PrefixCacheMiB = 8
	}
	e, err := Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func dialog(n int) []engine.Message {
	lines := []string{
		"Good morning! Did you sleep well?", "Yes thanks.",
		"Would you like some tea or coffee?", "Tea please.",
		"Milk and sugar?", "Just milk.",
		"Shall we go outside later?", "Maybe after lunch.",
		"Your sister is coming at three.", "Great!",
		"Do you want music on?",
	}
	var msgs []engine.Message
	for i := 0; i < n; i++ {
		role := engine.RoleSpeaker
		if i%2 == 1 {
			role = engine.RoleDisabledPerson
		}
		msgs = append(msgs, engine.Message{Role: role, Content: lines[i%len(lines)]})
	}
	return msgs
}

func request(n int, seed uint32) engine.GenerateRequest {
	return engine.GenerateRequest{
		SystemPrompt:  "You suggest replies for Sam.",
		Profile:       engine.Profile{Biography: "Sam is 34 and has ALS.", Persona: "dry humour", Language: "en"},
		ReplyLanguage: "en",
		Messages:      dialog(3),
		N:             n, Temperature: 0.8, Seed: seed,
	}
}

func texts(g engine.Generation) []string {
	var out []string
	for _, c := range g.Candidates {
		out = append(out, c.Text)
	}
	return out
}

func mustGenerate(tb testing.TB, e *Engine, req engine.GenerateRequest) engine.Generation {
	tb.Helper()
	g, err := e.Generate(context.Background(), req)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// checkGolden compares got with testdata/name (written with -update).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("prompt mismatch (-want +got):\n%s", d)
	}
}

func TestPromptGolden(t *testing.T) {
	req := engine.GenerateRequest{
		SystemPrompt: "You suggest short replies for an AAC user.",
		Profile: engine.Profile{
			Biography: "Alex, 52, former teacher, lives with MND.", Persona: "warm, brief",
			UserProfile: "likes jazz and gardening", Language: "en",
		},
		ReplyLanguage: "de-AT",
		Messages: []engine.Message{
			{Role: engine.RoleSpeaker, Content: "Hi Alex, how was the physio?"},
			{Role: engine.RoleDisabledPerson, Content: "Tiring."},
			{Role: engine.RoleDisabledPerson, Content: "But good."},
			{Role: engine.RoleSpeaker, Content: "  "},
			{Role: engine.RoleSpeaker, Content: "Do you want to rest now?", Audio: true},
		},
	}
	msgs := chatFor(systemMessage(req), withLanguage(dialogTurns(req.Messages), req.ReplyLanguage))
	for _, tmpl := range []string{"chatml", "llama3", "gemma", "mistral-v7", "phi3", chatMLTemplate} {
		name := tmpl
		if tmpl == chatMLTemplate {
			name = "demo-model"
		}
		t.Run(name, func(t *testing.T) {
			got, err := applyTemplate(tmpl, msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "prompt_"+name+".golden", got)
		})
	}
	if _, err := applyTemplate("no such template", msgs, true); !errors.Is(err, errUnknownTemplate) {
		t.Errorf("unknown template: err = %v, want errUnknownTemplate", err)
	}
}

func TestFitTurnsKeepsSystemAndLastSpeaker(t *testing.T) {
	turns := dialogTurns([]engine.Message{
		{Role: engine.RoleSpeaker, Content: "s1"}, {Role: engine.RoleDisabledPerson, Content: "d1"},
		{Role: engine.RoleSpeaker, Content: "s2"}, {Role: engine.RoleDisabledPerson, Content: "d2"},
	})
	for _, tc := range []struct {
		limit   int // messages accepted, system included
		want    []string
		dropped int
		err     error
	}{
		{limit: 5, want: []string{"sys", "s1", "d1", "s2", "d2"}},
		{limit: 3, want: []string{"sys", "s2", "d2"}, dropped: 2},
		{limit: 2, want: []string{"sys", "s2"}, dropped: 3},
		{limit: 1, err: errPromptTooLong},
	} {
		msgs, dropped, err := fitTurns("sys", append([]turn(nil), turns...), lastSpeaker(turns), func(m []chatMessage) (bool, error) {
			return len(m) <= tc.limit, nil
		})
		if !errors.Is(err, tc.err) {
			t.Fatalf("limit %d: err = %v, want %v", tc.limit, err, tc.err)
		}
		if err != nil {
			continue
		}
		var got []string
		for _, m := range msgs {
			got = append(got, m.Content)
		}
		if d := cmp.Diff(tc.want, got); d != "" || dropped != tc.dropped {
			t.Errorf("limit %d: dropped %d (want %d), messages (-want +got):\n%s", tc.limit, dropped, tc.dropped, d)
		}
	}
}

func TestReplyText(t *testing.T) {
	if got := cleanReply([]byte(" Yes\tplease\x01 \xff!  ")); got != "Yes please !" {
		t.Errorf("cleanReply = %q", got)
	}
	if a, b := dedupKey("Yes, please!"), dedupKey("  yes please"); a != b {
		t.Errorf("dedupKey differs: %q vs %q", a, b)
	}
	got := uniqueCandidates([]scored{{text: "Yes, please!"}, {text: "..."}, {text: "yes please"}, {text: "No"}}, map[string]bool{})
	if len(got) != 2 || got[0].text != "Yes, please!" || got[1].text != "No" {
		t.Errorf("uniqueCandidates = %+v", got)
	}
}

func TestOpenBadFiles(t *testing.T) {
	dir := t.TempDir()
	good, err := demoPath()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path, reason string
	}{
		{filepath.Join(dir, "missing.gguf"), "no such file"},
		{dir, "is a directory"},
		{write("text.gguf", []byte("hello, not a model")), "not a GGUF file"},
		{write("header.gguf", data[:100]), "more than the file can hold"},
		{write("tensors.gguf", data[:len(data)/2]), "past the end of the file"},
	} {
		e, err := Open(Options{ModelPath: tc.path})
		if err == nil {
			e.Close()
			t.Errorf("%s: Open succeeded", tc.path)
			continue
		}
		if engine.KindOf(err) != engine.KindLLM || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: err = %v (kind %v), want KindLLM naming the file and %q", tc.path, err, engine.KindOf(err), tc.reason)
		}
	}
}

func TestWriteDemoModel(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	for _, p := range []string{a, b} {
		if err := WriteDemoModel(p); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two demo models differ: the generator is not deterministic")
	}
	info, err := readGGUFInfo(a)
	if err != nil {
		t.Fatal(err)
	}
	if info.Arch != "llama" || info.Name != "replyd-demo" || info.ChatTemplate != chatMLTemplate || info.Layers != 2 ||
		info.Embd != 64 || info.Heads != 4 || info.KVHeads != 2 || info.KeyLength != 0 || info.ValueLength != 0 {
		t.Errorf("metadata: %+v", info)
	}
}

// TestQuantizedModel catches a misaligned tensor data section, which f32
// weights survive as shifted garbage but q8_0 and q4_0 blocks turn into NaN.
func TestQuantizedModel(t *testing.T) {
	for _, quant := range []string{"q8_0", "q4_0"} {
		cfg := DemoModelConfig()
		cfg.Quant = quant
		cfg.TiedEmbeddings = true
		p := filepath.Join(t.TempDir(), quant+".gguf")
		if err := WriteModel(p, cfg); err != nil {
			t.Fatal(err)
		}
		e, err := Open(Options{ModelPath: p, MaxReplyTokens: 8, PrefixCacheMiB: 1})
		if err != nil {
			t.Fatal(err)
		}
		g := mustGenerate(t, e, request(2, 1))
		e.Close()
		if len(g.Candidates) == 0 {
			t.Fatalf("%s: no candidates", quant)
		}
		for _, c := range g.Candidates {
			if math.IsNaN(c.MeanLogProb) || math.IsInf(c.MeanLogProb, 0) || c.MeanLogProb > 0 {
				t.Errorf("%s: candidate %q has mean log-probability %v", quant, c.Text, c.MeanLogProb)
			}
		}
	}
}

func TestGenerateDistinctCandidates(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 24})
	req := request(4, 11)
	g := mustGenerate(t, e, req)
	if len(g.Candidates) != 4 {
		t.Fatalf("got %d candidates, want 4: %q", len(g.Candidates), texts(g))
	}
	seen := map[string]bool{}
	for i, c := range g.Candidates {
		k := dedupKey(c.Text)
		if k == "" || seen[k] {
			t.Errorf("candidate %d %q is empty or a duplicate", i, c.Text)
		}
		seen[k] = true
		if c.Rank != i+1 || c.Length < 1 || c.Length > 24 || c.Language != "" {
			t.Errorf("candidate %d: rank %d length %d language %q (the pipeline sets the language)", i, c.Rank, c.Length, c.Language)
		}
		if math.IsNaN(c.MeanLogProb) || c.MeanLogProb > 0 {
			t.Errorf("candidate %d: mean log-probability %v", i, c.MeanLogProb)
		}
	}
	if g.PromptTokens == 0 || g.GenTokens < 4 {
		t.Errorf("prompt tokens %d, generated tokens %d", g.PromptTokens, g.GenTokens)
	}
}

func TestGenerateRepeatableWithSeed(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16})
	a := texts(mustGenerate(t, e, request(3, 42)))
	b := texts(mustGenerate(t, e, request(3, 42)))
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("same seed gave different candidates (-first +second):\n%s", d)
	}
	c := texts(mustGenerate(t, e, request(3, 43)))
	if cmp.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same candidates %q", a)
	}
}

func TestGenerationModesAgree(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16})
	// The same candidates; their order is the order they completed in,
	// which differs between the modes.
	want := texts(mustGenerate(t, e, request(3, 5)))
	slices.Sort(want)
	for _, m := range []Decoding{DecodeSequential, decodeNaive} {
		g, err := e.generate(context.Background(), request(3, 5), m)
		if err != nil {
			t.Fatal(err)
		}
		got := texts(g)
		slices.Sort(got)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%v decoding differs from batched (-batched +%v):\n%s", m, m, d)
		}
	}
}

func TestMaxCandidatesAndTemperatureBounds(t *testing.T) {
	e := openDemo(t, Options{MaxCandidates: 3, MaxReplyTokens: 12})
	if g := mustGenerate(t, e, request(10, 1)); len(g.Candidates) != 3 {
		t.Errorf("N=10 with MaxCandidates 3 gave %d candidates", len(g.Candidates))
	}
	if g := mustGenerate(t, e, request(0, 1)); len(g.Candidates) != 1 {
		t.Errorf("N=0 gave %d candidates, want 1", len(g.Candidates))
	}
	// Temperature 0: the first candidate is greedy, so the seed does not
	// change it, and with N=3 the others still differ from it.
	greedy := func(n int, seed uint32) engine.Generation {
		r := request(n, seed)
		r.Temperature = 0
		return mustGenerate(t, e, r)
	}
	g1, g2 := texts(greedy(1, 1)), texts(greedy(1, 2))
	if d := cmp.Diff(g1, g2); d != "" || len(g1) != 1 {
		t.Errorf("temperature 0 depends on the seed (-seed 1 +seed 2):\n%s", d)
	}
	if g3 := greedy(3, 1); len(g3.Candidates) != 3 || !containsText(g3, g1[0]) {
		t.Errorf("temperature 0, N=3 gave %q, want 3 candidates including the greedy %q", texts(g3), g1)
	}
	// Temperatures above 2 are clamped to 2.
	hot, max2 := request(3, 9), request(3, 9)
	hot.Temperature, max2.Temperature = 7, 2
	if d := cmp.Diff(texts(mustGenerate(t, e, max2)), texts(mustGenerate(t, e, hot))); d != "" {
		t.Errorf("temperature 7 not clamped to 2 (-2 +7):\n%s", d)
	}
}

func containsText(g engine.Generation, s string) bool {
	for _, c := range g.Candidates {
		if c.Text == s {
			return true
		}
	}
	return false
}

func TestCancelFreesSequences(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16})
	want := texts(mustGenerate(t, e, request(4, 3)))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	e.stepHook = func(step int) {
		if step == 3 {
			cancel()
			close(stopped)
		}
	}
	req := request(4, 3)
	req.DialogID = "cancelled"
	_, err := e.Generate(ctx, req)
	if engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("cancelled request: err = %v, want KindCanceled", err)
	}
	<-stopped
	// The next request runs after the owner left the cancelled one.
	e.stepHook = nil
	got := texts(mustGenerate(t, e, request(4, 3)))
	for i, n := range e.genLen {
		if n != 0 {
			t.Errorf("candidate sequence %d still holds %d positions", i, n)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request after a cancelled one differs (-before +after):\n%s", d)
	}
}

// TestCancelStopsSampling: once a running request's context is canceled (a
// tablet aborted its fetch and the HTTP server noticed), the owner runs not
// one more decode for it, and the log names the request.
func TestCancelStopsSampling(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := openDemo(t, Options{MaxReplyTokens: 32, Logger: logger})
	const cancelAt = 5 // a step inside sampling: the prompt takes one or two
	ctx, cancel := context.WithCancel(engine.WithRequestID(context.Background(), "req-cancel-7"))
	var mu sync.Mutex
	var after []int
	e.stepHook = func(step int) {
		mu.Lock()
		defer mu.Unlock()
		if step == cancelAt {
			cancel()
		} else if step > cancelAt {
			after = append(after, step)
		}
	}
	_, err := e.Generate(ctx, request(4, 3))
	if engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("err = %v, want KindCanceled", err)
	}
	// The owner is done with the request once the next one has run.
	e.stepHook = nil
	mustGenerate(t, e, request(1, 1))
	mu.Lock()
	defer mu.Unlock()
	if len(after) > 0 {
		t.Errorf("decode steps %v ran after the request was canceled at step %d", after, cancelAt)
	}
	want := `msg="generation canceled: stopped" component=llm request_id=req-cancel-7 decode_steps=` + strconv.Itoa(cancelAt+1) + " cause=\"context canceled\" aborted_in_decode=false"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("log lacks %q:\n%.3000s", want, buf.String())
	}
}

// TestLeavingTheQueue: a request canceled while it waits leaves the queue
// at once; the one running and the ones after it are served.
func TestLeavingTheQueue(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8})
	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	e.stepHook = func(int) {
		once.Do(func() { close(blocked); <-release })
	}
	first := make(chan error, 1)
	go func() { _, err := e.Generate(context.Background(), request(2, 1)); first <- err }()
	<-blocked // the first request is running and holds the owner

	waitCtx, leave := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, err := e.Generate(waitCtx, request(2, 1)); second <- err }()
	for deadline := time.Now().Add(time.Minute); e.QueueDepth() != 2; waitForOwner() {
		// Wait until the second request is queued.
		if time.Now().After(deadline) {
			t.Fatalf("the second request was not queued within a minute (queue depth %d)", e.QueueDepth())
		}
	}
	leave()
	if err := <-second; engine.KindOf(err) != engine.KindCanceled {
		t.Errorf("queued request that left: err = %v, want KindCanceled", err)
	}
	if d := e.QueueDepth(); d != 1 {
		t.Errorf("queue depth after the waiting request left = %d, want 1 (the running one)", d)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first request: %v", err)
	}
	mustGenerate(t, e, request(2, 1))
}

// waitForOwner lets the other goroutines run before a condition is polled
// again.
func waitForOwner() { time.Sleep(time.Millisecond) }

func TestPrefixCacheMatchesColdRun(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16})
	warm := request(3, 21)
	warm.DialogID = "dialog-1"
	warm.Messages = dialog(9)
	g := mustGenerate(t, e, warm)
	if g.CachedTokens != 0 {
		t.Errorf("first request of a dialog reused %d tokens", g.CachedTokens)
	}
	warm.Messages = dialog(11)
	gw := mustGenerate(t, e, warm)
	if gw.CachedTokens == 0 || gw.CachedTokens >= gw.PromptTokens {
		t.Fatalf("extended dialog reused %d of %d prompt tokens", gw.CachedTokens, gw.PromptTokens)
	}
	// A new engine holds nothing of the dialog.
	cold := warm
	cold.DialogID = ""
	gc := mustGenerate(t, openDemo(t, Options{MaxReplyTokens: 16}), cold)
	if gc.CachedTokens != 0 || gc.PromptTokens != gw.PromptTokens {
		t.Errorf("cold run: cached %d, prompt %d (warm prompt %d)", gc.CachedTokens, gc.PromptTokens, gw.PromptTokens)
	}
	if d := cmp.Diff(texts(gc), texts(gw)); d != "" {
		t.Errorf("prefix cache hit differs from a cold run (-cold +warm):\n%s", d)
	}
	// The same request again reuses all but the last token.
	if g := mustGenerate(t, e, warm); g.CachedTokens != g.PromptTokens-1 {
		t.Errorf("repeated request reused %d of %d tokens", g.CachedTokens, g.PromptTokens)
	}
}

func TestLongDialogDropsOldestTurns(t *testing.T) {
	const ctxPerSeq, replyTokens = 180, 8
	e := openDemo(t, Options{ContextPerSeq: ctxPerSeq, MaxReplyTokens: replyTokens, PrefixCacheMiB: 1})
	req := request(2, 4)
	req.Messages = dialog(11)
	full, err := applyTemplate(e.tmpl, chatFor(systemMessage(req), dialogTurns(req.Messages)), true)
	if err != nil {
		t.Fatal(err)
	}
	fullTokens, err := e.model.Tokenize(full, true, true)
	if err != nil {
		t.Fatal(err)
	}
	budget := ctxPerSeq - replyTokens - 1
	if len(fullTokens) <= budget {
		t.Fatalf("the whole dialog takes %d tokens and fits the budget of %d: the test needs a longer one", len(fullTokens), budget)
	}
	g := mustGenerate(t, e, req)
	if g.PromptTokens > budget || len(g.Candidates) == 0 {
		t.Errorf("prompt %d tokens (budget %d), %d candidates", g.PromptTokens, budget, len(g.Candidates))
	}
	req.SystemPrompt = strings.Repeat("Be kind. ", 100)
	if _, err := e.Generate(context.Background(), req); engine.KindOf(err) != engine.KindPromptTooLong {
		t.Errorf("a system prompt longer than the context: err = %v, want KindPromptTooLong", err)
	}
}

// TestPromptTooLongNamesFields: profile fields that together (not each)
// overflow the context give KindPromptTooLong, a permanent client error
// whose message names the fields with their sizes in tokens, largest first,
// and quotes none of their text.
func TestPromptTooLongNamesFields(t *testing.T) {
	const ctxPerSeq, replyTokens = 256, 8
	e := openDemo(t, Options{ContextPerSeq: ctxPerSeq, MaxReplyTokens: replyTokens, PrefixCacheMiB: 1})
	req := request(2, 4)
	req.Profile.Biography = strings.Repeat("Sam taught chemistry for thirty years. ", 4)
	req.Profile.Persona = strings.Repeat("Dry humour, short answers, loves puns. ", 8)
	req.Profile.UserProfile = ""
	_, err := e.Generate(context.Background(), req)
	if engine.KindOf(err) != engine.KindPromptTooLong {
		t.Fatalf("err = %v, want KindPromptTooLong", err)
	}
	var ee *engine.Error
	if !errors.As(err, &ee) {
		t.Fatalf("%T is not an *engine.Error", err)
	}
	budget := PromptBudget(ctxPerSeq, replyTokens)
	msg := ee.Message
	t.Log(msg)
	for _, want := range []string{fmt.Sprintf("fits %d:", budget), "persona ", "disabled_person_biography ", "the last speaker message ", "the system prompt (set by the administrator) "} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "user_profile") {
		t.Errorf("message names the empty user_profile: %s", msg)
	}
	if strings.Index(msg, "persona ") > strings.Index(msg, "disabled_person_biography ") {
		t.Errorf("the larger persona is not named first: %s", msg)
	}
	for _, text := range []string{"chemistry", "puns", "Sam"} {
		if strings.Contains(msg, text) {
			t.Errorf("message quotes the request's text %q: %s", text, msg)
		}
	}
	// A shorter persona fits: the sizes were the cause.
	req.Profile.Persona = "dry humour"
	mustGenerate(t, e, req)
}

// TestExamplesGiveWayToARequiredTurn: when the fields that must stay fit
// the context only without the room kept for remembered examples, the
// request is answered without examples rather than refused as too long.
func TestExamplesGiveWayToARequiredTurn(t *testing.T) {
	const ctxPerSeq, replyTokens = 256, 8
	e := openDemo(t, Options{ContextPerSeq: ctxPerSeq, MaxReplyTokens: replyTokens, MaxCandidates: 1, PrefixCacheMiB: 1})
	req := request(1, 4)
	// The longest persona that still fits without examples: a few tokens
	// short of the budget, far less than ExampleTokenBudget.
	fits := -1
	for n := 1; n < 40; n++ {
		req.Profile.Persona = strings.Repeat("Dry humour, short answers, loves puns. ", n)
		if _, err := e.Generate(context.Background(), req); engine.KindOf(err) == engine.KindPromptTooLong {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		fits = n
	}
	if fits < 1 {
		t.Fatal("no persona length fits the context")
	}
	req.Profile.Persona = strings.Repeat("Dry humour, short answers, loves puns. ", fits)
	req.Examples = []engine.Example{{Partner: "Tea?", Reply: "Yes please."}}
	g, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("with an example: %v, want an answer without it", err)
	}
	if g.Examples != 0 || g.PromptTokens > PromptBudget(ctxPerSeq, replyTokens) || len(g.Candidates) != 1 {
		t.Errorf("%d examples, prompt %d tokens, %d candidates", g.Examples, g.PromptTokens, len(g.Candidates))
	}
}

func TestCloseRejects(t *testing.T) {
	e := openDemo(t, Options{})
	if st := e.Status(); !st.Ready || !st.Demo || st.Backend != "cpu" || st.Name != "llm" {
		t.Errorf("status before Close = %+v", st)
	}
	e.Close()
	if _, err := e.Generate(context.Background(), request(1, 1)); engine.KindOf(err) != engine.KindNotReady {
		t.Errorf("after Close: err = %v, want KindNotReady", err)
	}
	if st := e.Status(); st.Ready {
		t.Errorf("status after Close = %+v", st)
	}
}

// TestCloseFreesAndReopens: Close frees the context and the model (a
// switch of models gives their memory back), is idempotent, and engines
// opened after it, while another is open, answer as before.
func TestCloseFreesAndReopens(t *testing.T) {
	keep := openDemo(t, Options{})
	defer keep.Close()
	for i := range 3 {
		e := openDemo(t, Options{})
		if _, err := e.Generate(context.Background(), request(2, uint32(i+1))); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		e.Close()
		e.Close()
		if st := e.Status(); st.Ready || st.QueueSize != 0 {
			t.Errorf("round %d: status after Close = %+v", i, st)
		}
		if _, err := e.Generate(context.Background(), request(1, 1)); engine.KindOf(err) != engine.KindNotReady {
			t.Errorf("round %d: after Close: %v, want KindNotReady", i, err)
		}
	}
	if _, err := keep.Generate(context.Background(), request(2, 9)); err != nil {
		t.Errorf("the engine kept open: %v", err)
	}
}

func TestLlamaLogsGoToSlog(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := openDemo(t, Options{Logger: logger})
	e.Close()
	out := buf.String()
	if !strings.Contains(out, "component=llama.cpp") || !strings.Contains(out, "language model loaded") {
		t.Errorf("llama.cpp's log lines did not reach the slog logger:\n%.2000s", out)
	}
}

// TestExamplesPromptGolden shows where remembered examples go: at the start
// of the partner's current turn, after everything the prefix cache keeps.
func TestExamplesPromptGolden(t *testing.T) {
	req := request(1, 1)
	msgs := chatFor(systemMessage(req), withLanguage(dialogTurns(req.Messages), req.ReplyLanguage))
	got, err := applyTemplate("chatml", withExamples(msgs, examplesNote([]engine.Example{
		{Partner: "Fancy a cuppa?", Reply: "Go on then, milk no sugar."},
		{Partner: "  Tea   or\ncoffee? ", Reply: strings.Repeat("very ", 30) + "long"},
	}, 100)), true)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "prompt_examples_chatml.golden", got)
	plain, _ := applyTemplate("chatml", msgs, true)
	cut := strings.LastIndex(plain, "<|im_start|>user\n") + len("<|im_start|>user\n")
	if !strings.HasPrefix(got, plain[:cut]) || !strings.HasSuffix(got, plain[cut:]) {
		t.Error("the examples are not one piece just before the partner's current words")
	}
}

// TestExamplesStayInBudget: examples add at most ExampleTokenBudget prompt
// tokens, dropping the least similar ones when all would not fit, and the
// dialog prefix before the partner's turn is still reused from the cache.
func TestExamplesStayInBudget(t *testing.T) {
	e := openDemo(t, Options{ContextPerSeq: 1024, Threads: 1, MaxCandidates: 2, MaxReplyTokens: 4, Seed: 5})
	base := request(1, 3)
	base.DialogID = "d-examples"
	plain := mustGenerate(t, e, base)

	short := base
	short.Examples = []engine.Example{{Partner: "Tea?", Reply: "Yes please."}}
	one := mustGenerate(t, e, short)
	if one.Examples != 1 || one.ExampleTokens <= 0 || one.PromptTokens-plain.PromptTokens != one.ExampleTokens {
		t.Errorf("one example: %d examples, %d tokens, prompt %d -> %d", one.Examples, one.ExampleTokens, plain.PromptTokens, one.PromptTokens)
	}
	if one.CachedTokens < plain.PromptTokens/2 {
		t.Errorf("the dialog prefix was not reused: %d of %d tokens cached", one.CachedTokens, one.PromptTokens)
	}

	long := base
	for i := range 3 {
		long.Examples = append(long.Examples, engine.Example{Partner: fmt.Sprint("Would you like to go for a long walk in the park this afternoon ", i), Reply: "Yes, if it does not rain, and if we can stop for an ice cream on the way back home."})
	}
	g := mustGenerate(t, e, long)
	if g.ExampleTokens > ExampleTokenBudget || g.PromptTokens-plain.PromptTokens > ExampleTokenBudget || g.Examples >= 3 || g.Examples == 0 {
		t.Errorf("long examples: %d examples, %d tokens (budget %d), prompt %d -> %d", g.Examples, g.ExampleTokens, ExampleTokenBudget, plain.PromptTokens, g.PromptTokens)
	}
}

// TestGPUMemoryHint: a load failure on a GPU backend says what the
// operator can do; on the CPU the reason is left as it is.
func TestGPUMemoryHint(t *testing.T) {
	const reason = "alloc_tensor_range: failed to allocate CUDA0 buffer of size 1640403456"
	if got := gpuMemoryHint(reason, "cpu"); got != reason {
		t.Errorf("cpu: %q", got)
	}
	if got := gpuMemoryHint(reason, "cuda"); !strings.HasPrefix(got, reason) || !strings.Contains(got, "REPLYD_GPU_LAYERS") {
		t.Errorf("cuda: %q", got)
	}
}

func TestParseSystemInfo(t *testing.T) {
	got := parseSystemInfo("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 0 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | LLAMAFILE = 1 | OPENMP = 0 | REPACK = 1 | ")
	if want := "SSE3 SSSE3 AVX AVX2 F16C FMA AVX512 LLAMAFILE REPACK"; got != want {
		t.Errorf("parseSystemInfo = %q, want %q", got, want)
	}
}

func TestCPUFeatures(t *testing.T) {
	f := CPUFeatures()
	t.Logf("ggml CPU features: %s", f)
	if f == "" {
		t.Error("llama_print_system_info names no CPU feature")
	}
}
