package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
)

// TestInferStopsWhenTheClientGoesAway runs over a real connection: when a
// tablet aborts its fetch (the partner spoke again), the server notices the
// closed connection, the engine's context is canceled (so the language
// model stops sampling), and the call is logged as canceled with 499.
func TestInferStopsWhenTheClientGoesAway(t *testing.T) {
	e := newEnvWithKeys(t, 0, "valid")
	started := make(chan string, 1)
	stopped := make(chan error, 1)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		started <- engine.RequestID(ctx)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	body, ct := multipartBody(t, payloadPart(simplePayload))
	ctx, abort := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/infer", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set(HeaderAPIKey, "valid")
	req.Header.Set("X-Request-ID", "tablet-req-1")
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if id := <-started; id != "tablet-req-1" {
		t.Errorf("the engine got request id %q, want the client's", id)
	}
	abort()
	select {
	case cause := <-stopped:
		if cause != context.Canceled {
			t.Errorf("the engine's context ended with %v, want context.Canceled", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not notice that the client went away")
	}
	if err := <-done; err == nil {
		t.Error("the aborted request got an answer")
	}
	for deadline := time.Now().Add(20 * time.Second); e.st.logCount() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if logs := e.st.logsCopy(); len(logs) != 1 || logs[0].Message != "infer failed: canceled" || logs[0].Status != StatusClientClosedRequest {
		t.Errorf("logs = %+v, want one 'infer failed: canceled' with 499", logs)
	}
}
