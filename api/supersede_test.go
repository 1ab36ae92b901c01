package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
)

// TestInferSuperseded: a newer request of the same key for the same
// dialog_id cancels the one in flight, which answers 409 superseded (not
// retryable, no Retry-After) while the newer one answers; a request of
// another dialog, of no dialog, or of another key for the same dialog_id
// is left alone.
func TestInferSuperseded(t *testing.T) {
	e := newEnvWithKeys(t, 0, "valid", "other")
	started := make(chan string, 8)
	release := make(chan struct{})
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		tag := req.Messages[0].Content
		started <- tag
		if strings.HasPrefix(tag, "wait") {
			select {
			case <-ctx.Done():
				return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
			case <-release:
			}
		}
		return echoInferer(ctx, req)
	}
	send := func(key, dialog, tag string) chan *httptest.ResponseRecorder {
		js := `{"messages":[{"role":"speaker","content":"` + tag + `"}]` + dialog + `}`
		req := inferReq(t, key, payloadPart(js))
		out := make(chan *httptest.ResponseRecorder, 1)
		go func() { out <- e.do(req) }()
		if got := <-started; got != tag {
			t.Fatalf("the engine started %q, want %q", got, tag)
		}
		return out
	}
	old := send("valid", `,"dialog_id":"d1"`, "wait old")
	otherDialog := send("valid", `,"dialog_id":"d2"`, "wait other dialog")
	noDialog := send("valid", ``, "wait no dialog")
	otherKey := send("other", `,"dialog_id":"d1"`, "wait other key")
	newer := send("valid", `,"dialog_id":"d1"`, "newer")

	var rec *httptest.ResponseRecorder
	select {
	case rec = <-old:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the older request of the dialog was not superseded")
	}
	if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != "" {
		t.Errorf("superseded request: status %d, Retry-After %q; want 409 without Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	want := `{"error":"superseded","message":"a newer request for the same dialog_id replaced this one; do not retry it"}`
	if d := cmp.Diff(want, strings.TrimSpace(rec.Body.String())); d != "" {
		t.Errorf("body (-want +got):\n%s", d)
	}
	if rec := <-newer; rec.Code != http.StatusOK {
		t.Errorf("newer request: status %d: %s", rec.Code, rec.Body.String())
	}
	for name, ch := range map[string]chan *httptest.ResponseRecorder{"other dialog": otherDialog, "no dialog": noDialog, "other key": otherKey} {
		select {
		case rec := <-ch:
			t.Errorf("%s: answered %d (%s) while it should still run", name, rec.Code, rec.Body.String())
		default:
		}
	}
	close(release)
	for name, ch := range map[string]chan *httptest.ResponseRecorder{"other dialog": otherDialog, "no dialog": noDialog, "other key": otherKey} {
		if rec := <-ch; rec.Code != http.StatusOK {
			t.Errorf("%s: status %d: %s", name, rec.Code, rec.Body.String())
		}
	}
}

// TestInferHistoryCounts: the answer says how many messages came before the
// partner's turn and how many went into the prompt, as the engine reports
// them; a request with no earlier messages has neither field.
func TestInferHistoryCounts(t *testing.T) {
	e := newEnvWithKeys(t, 0, "valid")
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		res, err := echoInferer(ctx, req)
		if len(req.Messages) > 1 {
			res.HistorySent, res.HistoryUsed = len(req.Messages)-1, 1
		}
		return res, err
	}
	for _, c := range []struct {
		payload string
		want    string
	}{
		{`{"messages":[{"role":"speaker","content":"Hi"},{"role":"disabled_person","content":"Hello"},{"role":"speaker","content":"Tea?"}]}`,
			`"history_turns_sent":2,"history_turns_used":1`},
		{simplePayload, ""},
	} {
		rec := e.do(inferReq(t, "valid", payloadPart(c.payload)))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		got := rec.Body.String()
		if c.want == "" && strings.Contains(got, "history_turns") || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: body %s, want %q", c.payload, got, c.want)
		}
	}
}

// TestFlightsOrderedByArrival: what supersedes is the order requests
// arrived in, not the order they are recorded in: a live turn is recorded
// once it was heard to hold speech, and an earlier turn heard late is the
// one cancelled, never the newer turn.
func TestFlightsOrderedByArrival(t *testing.T) {
	d := newDialogFlights()
	first, second := d.order(), d.order()
	ctx1, cancel1 := context.WithCancelCause(context.Background())
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel1(nil)
	defer cancel2(nil)
	end2 := d.startAt("k", "d", second, cancel2)
	end1 := d.startAt("k", "d", first, cancel1)
	if !superseded(ctx1) || ctx2.Err() != nil {
		t.Fatalf("older recorded late: older %v, newer %v", context.Cause(ctx1), context.Cause(ctx2))
	}
	end1() // the cancelled older one's end leaves the newer recorded
	ctx3, cancel3 := context.WithCancelCause(context.Background())
	defer cancel3(nil)
	defer d.start("k", "d", cancel3)()
	if !superseded(ctx2) || ctx3.Err() != nil {
		t.Fatalf("a request arriving now: previous %v, it %v", context.Cause(ctx2), context.Cause(ctx3))
	}
	end2()
}
