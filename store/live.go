package store

import (
	"fmt"
	"time"
)

// LiveTicket is the one-time ticket that opens one live session (GET
// /v1/live) for an API key. Browsers cannot set headers on a WebSocket, so
// the tablet trades its key (POST /v1/live/ticket, X-API-KEY) for a short
// ticket it puts in the socket's URL; the key never appears in a URL or a
// proxy's log. Only the ticket's SHA-256 is stored, and any box sharing the
// store can take it, exactly once.
type LiveTicket struct {
	Hash      string // lowercase hex SHA-256 of the ticket
	KeyHash   string // the API key it was issued to
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Valid checks a ticket that CreateLiveTicket is to store at now.
func (t LiveTicket) Valid(now time.Time) error {
	switch {
	case t.Hash == "":
		return fmt.Errorf("store: %w: empty live ticket hash", ErrInvalid)
	case t.KeyHash == "":
		return fmt.Errorf("store: %w: empty key hash on a live ticket", ErrInvalid)
	case !t.ExpiresAt.After(now):
		return fmt.Errorf("store: %w: the live ticket expires before it is created", ErrInvalid)
	}
	return nil
}
