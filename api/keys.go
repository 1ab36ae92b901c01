package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// APIKeyPrefix starts every API key replyd issues, so that secret scanners
// and people can recognise one.
const APIKeyPrefix = "rpd_"

// maxClientIDChars bounds client_id.
const maxClientIDChars = 200

// keyCreateRequest is APIKeyCreateRequest; pointers tell omitted from zero.
type keyCreateRequest struct {
	ClientID           string    `json:"client_id"`
	Scopes             *[]string `json:"scopes"`
	RateLimitPerMinute *int      `json:"rate_limit_per_minute"`
	Status             *string   `json:"status"`
	// MemoryUser, a pseudonym from GET /v1/admin/users, links the new key
	// to that user's memory (additive).
	MemoryUser string `json:"memory_user"`
}

// keyCreateResponse is APIKeyCreateResponse: the only place api_key appears.
type keyCreateResponse struct {
	APIKey             string    `json:"api_key"`
	APIKeyHash         string    `json:"api_key_hash"`
	ClientID           string    `json:"client_id"`
	Status             string    `json:"status"`
	Scopes             []string  `json:"scopes"`
	RateLimitPerMinute int       `json:"rate_limit_per_minute"`
	CreatedAt          time.Time `json:"created_at"`
	// Warnings are additive: things the administrator should know about
	// the key just created (an empty or duplicate client_id). The key is
	// created either way.
	Warnings []string `json:"warnings,omitempty"`
}

// keyRecord is APIKeyRecord with its capitalised field names. RevokedAt and
// LastUsedAt are null until set.
type keyRecord struct {
	APIKeyHash         string     `json:"APIKeyHash"`
	ClientID           string     `json:"ClientID"`
	Status             string     `json:"Status"`
	Scopes             []string   `json:"Scopes"`
	RateLimitPerMinute int        `json:"RateLimitPerMinute"`
	CreatedAt          time.Time  `json:"CreatedAt"`
	RevokedAt          *time.Time `json:"RevokedAt"`
	LastUsedAt         *time.Time `json:"LastUsedAt"`
	// LiveListening is whether the key may open live sessions (the user's
	// consent, PUT /v1/admin/keys/{api_key_hash}/live); in the key list
	// only.
	LiveListening *bool `json:"LiveListening,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toKeyRecord(k store.APIKey) keyRecord {
	scopes := k.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return keyRecord{
		APIKeyHash:         k.Hash,
		ClientID:           k.ClientID,
		Status:             k.Status,
		Scopes:             scopes,
		RateLimitPerMinute: k.RateLimitPerMinute,
		CreatedAt:          k.CreatedAt.UTC(),
		RevokedAt:          optTime(k.RevokedAt),
		LastUsedAt:         optTime(k.LastUsedAt),
	}
}

// handleCreateKey serves POST /v1/admin/keys. Defaults: scopes ["infer"],
// rate_limit_per_minute DefaultRateLimit, status active. rate_limit_per_minute
// 0 means unlimited. A key created with status revoked is revoked at once.
func (s *Server) handleCreateKey(c echo.Context) error {
	k, memSubject, err := s.readKeySettings(c)
	if err != nil {
		return err
	}
	warnings, err := s.clientIDWarnings(k.ClientID)
	if err != nil {
		return err
	}
	key, hash, err := newAPIKey()
	if err != nil {
		return err
	}
	now := s.now().UTC()
	k.Hash, k.CreatedAt = hash, now
	if k.Status == store.StatusRevoked {
		k.RevokedAt = now
	}
	if err := s.store.CreateKey(k); err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, k.Hash, "api key created: status %s, scopes [%s], %d requests/min",
		k.Status, strings.Join(k.Scopes, ","), k.RateLimitPerMinute)
	if memSubject != "" {
		if err := s.store.LinkMemory(k.Hash, memSubject); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		s.adminLog(c, store.LevelInfo, "user:"+userLabel(memSubject), "linked API key %s to the memory of user %s", shortHash(k.Hash), userLabel(memSubject))
	}
	resp := toKeyCreateResponse(key, k)
	resp.Warnings = warnings
	return c.JSON(http.StatusOK, resp)
}

// readKeySettings reads the optional APIKeyCreateRequest body of
// POST /v1/admin/keys and POST /v1/admin/pairings and returns the key it
// describes, without Hash and CreatedAt, and the subject of the memory
// user its memory_user names ("" for none).
func (s *Server) readKeySettings(c echo.Context) (store.APIKey, string, error) {
	var req keyCreateRequest
	if err := s.readJSON(c, &req, true); err != nil {
		return store.APIKey{}, "", err
	}
	if n := utf8.RuneCountInString(req.ClientID); n > maxClientIDChars {
		return store.APIKey{}, "", badRequest("client_id has %d characters; the limit is %d", n, maxClientIDChars)
	}
	scopes := []string{ScopeInfer}
	if req.Scopes != nil {
		scopes = []string{}
		for i, sc := range *req.Scopes {
			if !slices.Contains(knownScopes, sc) {
				return store.APIKey{}, "", badRequest("scopes[%d] is not a known scope; known scopes: %s", i, strings.Join(knownScopes, ", "))
			}
			if !slices.Contains(scopes, sc) {
				scopes = append(scopes, sc)
			}
		}
	}
	limit := s.limits.DefaultRateLimit
	if req.RateLimitPerMinute != nil {
		limit = *req.RateLimitPerMinute
		if limit < 0 || limit > s.limits.MaxRateLimit {
			return store.APIKey{}, "", badRequest("rate_limit_per_minute must be between 0 (unlimited) and %d", s.limits.MaxRateLimit)
		}
	}
	status := store.StatusActive
	if req.Status != nil {
		status = *req.Status
		if status != store.StatusActive && status != store.StatusRevoked {
			return store.APIKey{}, "", badRequest("status must be %q or %q", store.StatusActive, store.StatusRevoked)
		}
	}
	memSubject, err := s.memorySubjectOf(req.MemoryUser)
	if err != nil {
		return store.APIKey{}, "", err
	}
	return store.APIKey{ClientID: req.ClientID, Status: status, Scopes: scopes, RateLimitPerMinute: limit}, memSubject, nil
}

// newAPIKey mints a key and returns it with its hash.
func newAPIKey() (key, hash string, err error) {
	key, err = secret.Token(APIKeyPrefix)
	if err != nil {
		return "", "", err
	}
	return key, secret.Hash(key), nil
}

// toKeyCreateResponse is the APIKeyCreateResponse for the new key k whose
// value is key.
func toKeyCreateResponse(key string, k store.APIKey) keyCreateResponse {
	scopes := k.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return keyCreateResponse{
		APIKey:             key,
		APIKeyHash:         k.Hash,
		ClientID:           k.ClientID,
		Status:             k.Status,
		Scopes:             scopes,
		RateLimitPerMinute: k.RateLimitPerMinute,
		CreatedAt:          k.CreatedAt.UTC(),
	}
}

// clientIDWarnings says what is wrong with a new key's client_id without
// refusing it: empty, or already the name of an active key (the logs and
// statistics name keys by it, so two tablets would look like one).
func (s *Server) clientIDWarnings(clientID string) ([]string, error) {
	name := strings.TrimSpace(clientID)
	if name == "" {
		return []string{"client_id is empty: the key list, the logs and the statistics cannot tell this tablet from others; name it (e.g. tablet-ward-3) in a new key"}, nil
	}
	active, err := s.store.ListKeys(0, false)
	if err != nil {
		return nil, err
	}
	for _, k := range active {
		if strings.EqualFold(strings.TrimSpace(k.ClientID), name) {
			return []string{fmt.Sprintf("client_id %q is already the name of another active key (created %s): the logs and statistics will not tell the two apart", name, k.CreatedAt.UTC().Format(time.RFC3339))}, nil
		}
	}
	return nil, nil
}

// keyList is GET /v1/admin/keys's answer: the seed's {items, count} and,
// when more keys follow, the cursor of the next page.
type keyList struct {
	itemList[keyRecord]
	NextCursor string `json:"next_cursor,omitempty"`
}

// handleListKeys serves GET /v1/admin/keys: newest first, limit
// DefaultListLimit (1..MaxListLimit), include_revoked false by default;
// cursor (a next_cursor of an earlier answer) continues after that page.
func (s *Server) handleListKeys(c echo.Context) error {
	limit, err := s.listLimit(c)
	if err != nil {
		return err
	}
	includeRevoked := false
	if v := c.QueryParam("include_revoked"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("include_revoked must be true or false")
		}
		includeRevoked = b
	}
	var after *store.KeyCursor
	if v := c.QueryParam("cursor"); v != "" {
		cur, err := store.ParseKeyCursor(v)
		if err != nil {
			return badRequest("cursor must be a next_cursor from an earlier answer of /v1/admin/keys")
		}
		after = &cur
	}
	keys, next, err := s.store.ListKeysPage(after, limit, includeRevoked)
	if err != nil {
		return err
	}
	out := keyList{itemList: listOf(keys, toKeyRecord)}
	if next != nil {
		out.NextCursor = next.String()
	}
	for i := range out.Items {
		// One read a key: the list is the admin page's, at most
		// MaxListLimit keys, and the switch lives beside the key record.
		off, err := s.store.LiveOff(out.Items[i].APIKeyHash)
		if err != nil {
			return err
		}
		on := !off
		out.Items[i].LiveListening = &on
	}
	return c.JSON(http.StatusOK, out)
}

// handleRevokeKey serves DELETE /v1/admin/keys/{api_key_hash}: it sets the
// status to revoked and RevokedAt, answers the record, and is idempotent (a
// second call keeps the first RevokedAt). The key is refused from the next
// request on, and its work in progress (live sessions, inferences) ends
// before the answer. An unknown hash is 404.
func (s *Server) handleRevokeKey(c echo.Context) error {
	hash := strings.ToLower(c.Param("api_key_hash"))
	if !isKeyHash(hash) {
		return errorf(CodeNotFound, "no API key has this api_key_hash (it is 64 hex characters)")
	}
	before, err := s.store.GetKey(hash)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "no API key has this api_key_hash")
	}
	if err != nil {
		return err
	}
	k, err := s.store.RevokeKey(hash, s.now().UTC())
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "no API key has this api_key_hash")
	}
	if err != nil {
		return err
	}
	if before.Status != store.StatusRevoked {
		s.adminLog(c, store.LevelInfo, hash, "api key revoked")
	}
	// Its work in progress ends: on this box now, on the others within
	// KeyRecheck (rights.go).
	s.rightsChanged(hash)
	return c.JSON(http.StatusOK, toKeyRecord(k))
}

// listLimit parses the limit query parameter: DefaultListLimit when absent,
// 1..MaxListLimit otherwise.
func (s *Server) listLimit(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return s.limits.DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > s.limits.MaxListLimit {
		return 0, badRequest("limit must be an integer between 1 and %d", s.limits.MaxListLimit)
	}
	return n, nil
}
