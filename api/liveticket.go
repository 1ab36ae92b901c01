package api

// Live tickets and the live switches. Browsers cannot set headers on a
// WebSocket, and an API key in a URL ends up in proxy logs and browser
// history: the tablet trades its key for a one-time ticket (POST
// /v1/live/ticket with X-API-KEY) and opens the socket with it. The store
// keeps only the ticket's SHA-256 and gives it out once, so any box behind
// the proxy can honour it and none twice.

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// budgetLive is the rate-limit budget of live tickets: as large as the
// key's inference budget, and apart from it, so that reconnecting never
// costs a turn.
const budgetLive = "#live"

func init() {
	budgetExceeded[budgetLive] = "live ticket rate limit of %d per minute exceeded for this API key; retry in %d s"
}

// liveTicketPrefix starts every live ticket, so that one pasted where a key
// belongs is recognisable.
const liveTicketPrefix = "rlt_"

// liveTurnTicketPrefix starts a one-turn ticket (POST /v1/live/ticket?turns=1,
// issue 35): its session hears one turn, answers it and closes. The mark
// is in the ticket itself, whose hash is what the store keeps, so a client
// cannot turn a one-turn ticket into a continuous one.
const liveTurnTicketPrefix = "rlt1_"

// oneTurnTicket reports whether the ticket asks for one turn.
func oneTurnTicket(tok string) bool { return strings.HasPrefix(tok, liveTurnTicketPrefix) }

// parseTurns reads the turns query parameter of a ticket request: absent
// for continuous listening, 1 for one turn.
func parseTurns(c echo.Context) (oneTurn bool, err error) {
	switch v := c.QueryParam("turns"); v {
	case "":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, badRequest("turns must be 1 (one turn) or absent (continuous listening)")
	}
}

// liveTicketResponse answers POST /v1/live/ticket.
type liveTicketResponse struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	// URL is the path and query to open the socket with (ws: or wss: on
	// the host the ticket was asked from): liveURL.
	URL string `json:"url"`
}

// handleLiveTicket serves POST /v1/live/ticket.
func (s *Server) handleLiveTicket(c echo.Context) error {
	key, _, err := s.apiKey(c)
	if err != nil {
		return err
	}
	oneTurn, err := parseTurns(c)
	if err != nil {
		return err
	}
	if err := s.liveAllowedFor(key, oneTurn); err != nil {
		return err
	}
	if err := s.admit(c, key, budgetLive); err != nil {
		return err
	}
	prefix := liveTicketPrefix
	if oneTurn {
		prefix = liveTurnTicketPrefix
	}
	tok, err := secret.Token(prefix)
	if err != nil {
		return err
	}
	now := s.now()
	t := store.LiveTicket{Hash: secret.Hash(tok), KeyHash: key.Hash, CreatedAt: now, ExpiresAt: now.Add(s.limits.LiveTicketTTL)}
	if err := s.store.CreateLiveTicket(t, now); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusCreated, liveTicketResponse{Ticket: tok, ExpiresAt: t.ExpiresAt.UTC(), URL: liveURL(tok, key.Hash)})
}

// liveURL is the session's path and query: the ticket, and route, the
// first 16 hex digits of the key's SHA-256, by which a proxy in front of
// several boxes sends the socket to the box that holds the key's dialogs
// (scripts/haproxy.cfg hashes the same value of X-API-KEY). It names the
// key no more than api_key_hash does, and opens nothing.
func liveURL(ticket, keyHash string) string {
	return "/v1/live?ticket=" + ticket + "&route=" + keyHash[:16]
}

// liveAllowed refuses live listening when the box or the key has it
// switched off, or when the box cannot listen (no voice detector).
func (s *Server) liveAllowed(key store.APIKey) error {
	return s.liveAllowedFor(key, false)
}

// liveAllowedFor is liveAllowed for a session of one turn or continuous.
// One turn (the page's Listen, which opens the microphone for that turn
// only, as an upload does) needs the box's live listening and voice
// detection but not the key's live switch, which governs continuous
// (hands-free) listening.
func (s *Server) liveAllowedFor(key store.APIKey, oneTurn bool) error {
	if s.liveOff {
		return errorf(CodeForbidden, "live listening is switched off on this box (REPLYD_LIVE=off)")
	}
	if s.voice == nil {
		return &Error{Code: CodeNotReady, Message: "live listening needs the voice activity detection model, which is not loaded", RetryAfter: s.limits.NotReadyRetryAfter}
	}
	if oneTurn {
		return nil
	}
	off, err := s.store.LiveOff(key.Hash)
	if err != nil {
		return err
	}
	if off {
		return errorf(CodeForbidden, "live listening is switched off for this API key")
	}
	return nil
}

// liveState says whether this box opens live sessions, for the admin
// status: "off" (REPLYD_LIVE=off), "no_vad" (no voice detection model) or
// "on". A key's own switch is in the key list.
func (s *Server) liveState() string {
	switch {
	case s.liveOff:
		return "off"
	case s.voice == nil:
		return "no_vad"
	}
	return "on"
}

// takeLiveTicket trades the ticket of the socket's URL for its key. Every
// refusal is a failed authentication of the client address.
func (s *Server) takeLiveTicket(c echo.Context) (store.APIKey, error) {
	fail := func(format string, args ...any) (store.APIKey, error) {
		if e := s.authFailed(c, failLiveTicket); e != nil {
			return store.APIKey{}, e
		}
		return store.APIKey{}, errorf(CodeUnauthorized, format, args...)
	}
	if e := s.throttledAddr(c); e != nil {
		return store.APIKey{}, e
	}
	tok := c.QueryParam("ticket")
	if tok == "" {
		return fail("the ticket query parameter is required (POST /v1/live/ticket with X-API-KEY gives one)")
	}
	if len(tok) > maxSecretHeader || !strings.HasPrefix(tok, liveTicketPrefix) && !oneTurnTicket(tok) {
		return fail("the ticket is not a live ticket")
	}
	t, err := s.store.TakeLiveTicket(secret.Hash(tok), s.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fail("the ticket is unknown or was used; ask for a new one")
	case errors.Is(err, store.ErrExpired):
		return fail("the ticket expired; ask for a new one")
	case err != nil:
		return store.APIKey{}, err
	}
	key, err := s.store.GetKey(t.KeyHash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fail("the ticket's API key no longer exists")
	case err != nil:
		return store.APIKey{}, err
	case key.Status != store.StatusActive:
		return fail("the ticket's API key has been revoked")
	}
	return key, nil
}

// liveSwitchBody is the body of PUT /v1/admin/keys/{api_key_hash}/live.
type liveSwitchBody struct {
	Enabled *bool `json:"enabled"`
}

// liveSwitchResponse answers it.
type liveSwitchResponse struct {
	APIKeyHash string `json:"api_key_hash"`
	Enabled    bool   `json:"enabled"`
}

// handleLiveSwitch serves PUT /v1/admin/keys/{api_key_hash}/live: switch
// live listening on or off for one key (the user's consent). Sessions of
// the key that are open when it is switched off close with 4403: on this
// box at once, on the others within KeyRecheck (rights.go).
func (s *Server) handleLiveSwitch(c echo.Context) error {
	hash := strings.ToLower(c.Param("api_key_hash"))
	if !isKeyHash(hash) {
		return errorf(CodeNotFound, "no API key has this api_key_hash (it is 64 hex characters)")
	}
	var body liveSwitchBody
	if err := s.readJSON(c, &body, false); err != nil {
		return err
	}
	if body.Enabled == nil {
		return badRequest("enabled is required (true or false)")
	}
	err := s.store.SetLiveOff(hash, !*body.Enabled)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "no API key has this api_key_hash")
	}
	if err != nil {
		return err
	}
	state := "on"
	if !*body.Enabled {
		state = "off"
		s.rightsChanged(hash) // its sessions on this box close now
	}
	s.adminLog(c, store.LevelInfo, hash, "live listening switched %s", state)
	return c.JSON(http.StatusOK, liveSwitchResponse{APIKeyHash: hash, Enabled: *body.Enabled})
}

// liveDocs are the live session's bounds as client.md and openapi.yaml
// state them.
type liveDocs struct {
	TicketTTLSeconds  int64
	IdleSeconds       int64
	PingSeconds       int64
	WriteSeconds      int64
	MaxFrame          string
	MaxPerAddr        int
	EndSilenceMS      int64
	PauseMS           int64
	MinSpeechMS       int64
	MaxTurnSeconds    int64
	ClosedInvalid     int
	ClosedIdle        int
	ClosedSwitchedOff int
	ClosedRevoked     int
	// KeyRecheckSeconds bounds how long a key changed on another box
	// sharing the store keeps its work (rights.go).
	KeyRecheckSeconds float64
}

func (s *Server) liveDocData() liveDocs {
	l, t := s.limits, s.turnCfg
	return liveDocs{
		TicketTTLSeconds:  int64(l.LiveTicketTTL / time.Second),
		IdleSeconds:       int64(l.LiveIdle / time.Second),
		PingSeconds:       int64(l.LivePing / time.Second),
		WriteSeconds:      int64(l.LiveWriteTimeout / time.Second),
		MaxFrame:          formatBytes(l.MaxLiveFrameBytes),
		MaxPerAddr:        l.MaxLivePerAddr,
		EndSilenceMS:      t.EndSilence.Milliseconds(),
		PauseMS:           t.Pause.Milliseconds(),
		MinSpeechMS:       t.MinSpeech.Milliseconds(),
		MaxTurnSeconds:    int64(min(t.MaxTurn, l.MaxAudio) / time.Second),
		ClosedInvalid:     int(CloseInvalidMessage),
		ClosedIdle:        int(CloseIdle),
		ClosedSwitchedOff: int(CloseSwitchedOff),
		ClosedRevoked:     int(CloseRevoked),
		KeyRecheckSeconds: l.KeyRecheck.Seconds(),
	}
}
