package engine

import "context"

type requestIDKey struct{}

// WithRequestID returns ctx carrying the HTTP request id, so that the
// engines' log lines about one request can name it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id WithRequestID put in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
