package api

// The memory of users with remember: true, and the outcome export: admin
// only. Texts leave replyd only through these calls (and the backup); each
// export and deletion writes an admin log entry, which never holds text.

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// pseudonymPrefix starts every user pseudonym.
const pseudonymPrefix = "p_"

// userLabel is how admins see a stored user: "p_" and the first 16 hex
// digits of its subject (Server.pseudonym of its user_id). It is stable,
// and names no user_id.
func userLabel(subject string) string {
	if len(subject) > 16 {
		subject = subject[:16]
	}
	return pseudonymPrefix + subject
}

// contentNDJSON is the media type of the JSON Lines exports.
const contentNDJSON = "application/x-ndjson"

type memoryUserJSON struct {
	User      string     `json:"user"`
	Pairs     int        `json:"pairs"`
	CreatedAt time.Time  `json:"created_at"`
	LastAt    *time.Time `json:"last_at"`
	// Keys are the api_key_hash of the keys that read and write this
	// memory: the one that made it and those an admin linked.
	Keys []string `json:"keys"`
}

func toMemoryUserJSON(u store.MemoryUser) memoryUserJSON {
	keys := u.Keys
	if keys == nil {
		keys = []string{}
	}
	return memoryUserJSON{User: userLabel(u.Subject), Pairs: u.Pairs, CreatedAt: u.CreatedAt.UTC(), LastAt: optTime(u.LastAt), Keys: keys}
}

// handleListUsers serves GET /v1/admin/users: every user with a memory, by
// pseudonym, with the number of pairs kept and the keys that use it; with
// limit (1..MaxListLimit, checked as on the other lists), the first limit.
func (s *Server) handleListUsers(c echo.Context) error {
	limit := 0
	if c.QueryParam("limit") != "" {
		n, err := s.listLimit(c)
		if err != nil {
			return err
		}
		limit = n
	}
	users, err := s.store.MemoryUsers()
	if err != nil {
		return err
	}
	if limit > 0 && len(users) > limit {
		users = users[:limit]
	}
	return c.JSON(http.StatusOK, listOf(users, toMemoryUserJSON))
}

// userRef is what the {user} path parameter names: the stored subjects and
// the label the admin log uses.
type userRef struct {
	subjects []string
	label    string
	users    []store.MemoryUser // the memory users among them
}

// userOf resolves the {user} path parameter: a listed pseudonym ("p_…"),
// else a user_id as tablets send it (URL-escaped in the path). A user_id
// names every memory kept for it, whichever keys use them (one per key
// namespace, see userSubject), and the subject memories from before
// memories were scoped to keys had (its tag).
func (s *Server) userOf(c echo.Context) (userRef, error) {
	v := c.Param("user")
	if u, err := url.PathUnescape(v); err == nil {
		v = u
	}
	if v == "" {
		return userRef{}, badRequest("user is required: a pseudonym from /v1/admin/users or a user_id")
	}
	users, err := s.store.MemoryUsers()
	if err != nil {
		return userRef{}, err
	}
	if strings.HasPrefix(v, pseudonymPrefix) {
		for _, u := range users {
			if userLabel(u.Subject) == v {
				return userRef{subjects: []string{u.Subject}, label: v, users: []store.MemoryUser{u}}, nil
			}
		}
	}
	if len(v) > s.limits.MaxIDChars {
		return userRef{}, badRequest("user has more than %d characters", s.limits.MaxIDChars)
	}
	key, err := s.pseudonymKey()
	if err != nil {
		return userRef{}, err
	}
	uid := secret.Hash(v)
	tag := secret.PseudonymOfHash(key, uid)
	ref := userRef{subjects: []string{tag}, label: userLabel(tag)}
	seen := map[string]bool{tag: true}
	for _, u := range users {
		if u.Tag != tag {
			continue
		}
		ref.users = append(ref.users, u)
		if !seen[u.Subject] {
			seen[u.Subject] = true
			ref.subjects = append(ref.subjects, u.Subject)
		}
	}
	// The user_id in every key's namespace: outcomes of inferences made
	// without remember are kept under those subjects too.
	keys, err := s.store.ListKeys(0, true)
	if err != nil {
		return userRef{}, err
	}
	for _, k := range keys {
		if subj := keyNamespaceSubject(key, k.Hash, uid); !seen[subj] {
			seen[subj] = true
			ref.subjects = append(ref.subjects, subj)
		}
	}
	if len(ref.users) == 1 {
		ref.label = userLabel(ref.users[0].Subject)
	}
	return ref, nil
}

// oneMemoryUser resolves {user} to exactly one memory user, for linking.
func (s *Server) oneMemoryUser(c echo.Context) (store.MemoryUser, error) {
	ref, err := s.userOf(c)
	if err != nil {
		return store.MemoryUser{}, err
	}
	switch len(ref.users) {
	case 0:
		return store.MemoryUser{}, errorf(CodeNotFound, "no remembered replies are kept for this user")
	case 1:
		return ref.users[0], nil
	}
	return store.MemoryUser{}, errorf(CodeConflict, "this user_id has %d memories, one for each tablet that made one; name one by its pseudonym from GET /v1/admin/users", len(ref.users))
}

// linkRequest is the body of POST /v1/admin/users/{user}/keys.
type linkRequest struct {
	APIKeyHash string `json:"api_key_hash"`
}

// handleLinkUserKey serves POST /v1/admin/users/{user}/keys: the key named
// by api_key_hash reads and writes this memory from now on when it sends
// the memory's user_id (one person's second tablet or phone), in place of
// a memory of its own for that user_id. It answers the user as listed.
func (s *Server) handleLinkUserKey(c echo.Context) error {
	var req linkRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	if !isKeyHash(req.APIKeyHash) {
		return badRequest("api_key_hash must be 64 lowercase hex characters: the api_key_hash of a key from GET /v1/admin/keys")
	}
	u, err := s.oneMemoryUser(c)
	if err != nil {
		return err
	}
	if err := s.store.LinkMemory(req.APIKeyHash, u.Subject); errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "no API key has this api_key_hash (or the user was deleted meanwhile)")
	} else if err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, "user:"+userLabel(u.Subject), "linked API key %s to the memory of user %s", shortHash(req.APIKeyHash), userLabel(u.Subject))
	return s.answerMemoryUser(c, u.Subject)
}

// handleUnlinkUserKey serves DELETE /v1/admin/users/{user}/keys/{api_key_hash}:
// the key no longer uses this memory (a key keeps reaching a memory it made
// itself: revoke the key, or delete the user, to end that).
func (s *Server) handleUnlinkUserKey(c echo.Context) error {
	hash := c.Param("api_key_hash")
	if !isKeyHash(hash) {
		return badRequest("api_key_hash must be 64 lowercase hex characters")
	}
	u, err := s.oneMemoryUser(c)
	if err != nil {
		return err
	}
	if err := s.store.UnlinkMemory(hash, u.Subject); errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "this API key is not linked to this user's memory")
	} else if err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, "user:"+userLabel(u.Subject), "unlinked API key %s from the memory of user %s", shortHash(hash), userLabel(u.Subject))
	return s.answerMemoryUser(c, u.Subject)
}

// answerMemoryUser answers 200 with the memory user as GET /v1/admin/users
// lists it.
func (s *Server) answerMemoryUser(c echo.Context, subject string) error {
	users, err := s.store.MemoryUsers()
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Subject == subject {
			return c.JSON(http.StatusOK, toMemoryUserJSON(u))
		}
	}
	return errorf(CodeNotFound, "no remembered replies are kept for this user")
}

// shortHash is the first 12 digits of a key hash, for log messages.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// memorySubjectOf resolves the optional memory_user of a key or pairing
// request to the subject of one memory user; "" for none.
func (s *Server) memorySubjectOf(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if !strings.HasPrefix(v, pseudonymPrefix) {
		return "", badRequest("memory_user must be a user's pseudonym (p_…) from GET /v1/admin/users")
	}
	users, err := s.store.MemoryUsers()
	if err != nil {
		return "", err
	}
	for _, u := range users {
		if userLabel(u.Subject) == v {
			return u.Subject, nil
		}
	}
	return "", errorf(CodeNotFound, "memory_user: no remembered replies are kept for this user")
}

// requireJSONL checks the format query parameter: jsonl (the default) is
// the only one.
func requireJSONL(c echo.Context) error {
	if f := c.QueryParam("format"); f != "" && f != "jsonl" {
		return badRequest("format must be jsonl")
	}
	return nil
}

// dialogLine is one line of the exports, in `replyd eval`'s input format:
// the partner's turn as messages and what the user really said as reply,
// with what is known about the outcome.
type dialogLine struct {
	Messages        []dialogMessage `json:"messages,omitempty"`
	Reply           string          `json:"reply,omitempty"`
	InferenceID     string          `json:"inference_id"`
	At              time.Time       `json:"at"`
	User            string          `json:"user,omitempty"`
	APIKeyHash      string          `json:"api_key_hash,omitempty"`
	PromptVersion   string          `json:"prompt_version,omitempty"`
	Outcome         string          `json:"outcome,omitempty"`
	ChosenRank      int             `json:"chosen_rank,omitempty"`
	SpokenChars     int             `json:"spoken_chars,omitempty"`
	KeystrokesSaved *int            `json:"keystrokes_saved,omitempty"`
	TimeToChoiceMS  *int64          `json:"time_to_choice_ms,omitempty"`
}

type dialogMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// streamJSONL answers 200 with Content-Type application/x-ndjson and
// returns an encoder writing one JSON value per line.
func streamJSONL(c echo.Context, filename string) *json.Encoder {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, contentNDJSON)
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+filename+`"`)
	h.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(http.StatusOK)
	return json.NewEncoder(c.Response())
}

// handleUserPairs serves GET /v1/admin/users/{user}/pairs?format=jsonl:
// the user's remembered pairs, oldest first, one JSON line each.
func (s *Server) handleUserPairs(c echo.Context) error {
	if err := requireJSONL(c); err != nil {
		return err
	}
	ref, err := s.userOf(c)
	if err != nil {
		return err
	}
	pseudo := ref.label
	var pairs []store.Pair
	found := false
	for _, subj := range ref.subjects {
		ps, rev, err := s.store.MemoryPairs(subj)
		if err != nil {
			return err
		}
		found = found || rev != 0
		pairs = append(pairs, ps...)
	}
	if !found {
		return errorf(CodeNotFound, "no remembered replies are kept for this user")
	}
	slices.SortStableFunc(pairs, func(a, b store.Pair) int { return a.At.Compare(b.At) })
	s.adminLog(c, store.LevelInfo, "user:"+pseudo, "exported %d remembered pairs of user %s", len(pairs), pseudo)
	enc := streamJSONL(c, pseudo+"-pairs.jsonl")
	for _, p := range pairs {
		line := dialogLine{
			Messages: []dialogMessage{{Role: "speaker", Content: p.Partner}}, Reply: p.Reply,
			InferenceID: p.InferenceID, At: p.At.UTC(), User: pseudo,
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

type userDeletionJSON struct {
	User          string `json:"user"`
	Pairs         int    `json:"pairs"`
	Pending       int    `json:"pending"`
	Outcomes      int    `json:"outcomes"`
	KeyDestroyed  bool   `json:"key_destroyed"`
	ScrubbedPages int    `json:"scrubbed_pages"`
	ScrubMS       int64  `json:"scrub_ms"`
}

// handleDeleteUser serves DELETE /v1/admin/users/{user}: it destroys the
// user's key, pairs, texts awaiting feedback and outcomes, and overwrites
// the data file's free pages, all before it answers.
func (s *Server) handleDeleteUser(c echo.Context) error {
	ref, err := s.userOf(c)
	if err != nil {
		return err
	}
	pseudo := ref.label
	var d store.UserDeletion
	found := false
	for _, subj := range ref.subjects {
		one, err := s.store.DeleteUser(subj)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		found = true
		d.Pairs += one.Pairs
		d.Pending += one.Pending
		d.Outcomes += one.Outcomes
		d.Key = d.Key || one.Key
		d.ScrubbedPages += one.ScrubbedPages
		d.Scrub += one.Scrub
		if one.ScrubProblem != "" {
			d.ScrubProblem = one.ScrubProblem
		}
	}
	if !found {
		return errorf(CodeNotFound, "nothing is stored for this user")
	}
	s.adminLog(c, store.LevelInfo, "user:"+pseudo, "deleted user %s: %d pairs, %d pending texts, %d outcomes, key destroyed: %t; %d free pages overwritten in %d ms",
		pseudo, d.Pairs, d.Pending, d.Outcomes, d.Key, d.ScrubbedPages, d.Scrub.Milliseconds())
	if d.ScrubProblem != "" {
		s.adminLog(c, store.LevelWarn, "user:"+pseudo, "deleted user %s, but clearing the space its rows took is incomplete: %s", pseudo, d.ScrubProblem)
	}
	return c.JSON(http.StatusOK, userDeletionJSON{
		User: pseudo, Pairs: d.Pairs, Pending: d.Pending, Outcomes: d.Outcomes, KeyDestroyed: d.Key,
		ScrubbedPages: d.ScrubbedPages, ScrubMS: d.Scrub.Milliseconds(),
	})
}

// handleOutcomesExport serves GET /v1/admin/outcomes?format=jsonl: every
// reported outcome of the window's inferences (window and since as for
// stats; without either, everything still kept), oldest first; the texts
// (messages, reply) only for users with remember: true.
func (s *Server) handleOutcomesExport(c echo.Context) error {
	if err := requireJSONL(c); err != nil {
		return err
	}
	now := s.now().UTC()
	since := time.Time{}
	if c.QueryParam("window") != "" || c.QueryParam("since") != "" {
		var err error
		if since, _, err = s.windowAt(c, now); err != nil {
			return err
		}
	}
	var enc *json.Encoder
	lines, texts := 0, 0
	err := s.store.Outcomes(since, now.Add(time.Second), func(r store.OutcomeRecord) error {
		if enc == nil {
			enc = streamJSONL(c, "outcomes.jsonl")
		}
		inf, o := r.Inference, r.Inference.Outcome
		line := dialogLine{
			InferenceID: inf.ID, At: inf.At.UTC(), APIKeyHash: inf.KeyHash, PromptVersion: inf.PromptVersion,
			Outcome: o.Kind, ChosenRank: o.Rank, SpokenChars: o.SpokenChars, KeystrokesSaved: &o.KeystrokesSaved,
		}
		if inf.Subject != "" && inf.Subject != inf.KeyHash {
			line.User = userLabel(inf.Subject)
		}
		if o.TimeToChoiceMS >= 0 {
			line.TimeToChoiceMS = &o.TimeToChoiceMS
		}
		if p := r.Pair; p != nil {
			line.Messages = []dialogMessage{{Role: "speaker", Content: p.Partner}}
			line.Reply = p.Reply
			texts++
		}
		lines++
		return enc.Encode(line)
	})
	if enc == nil && err == nil {
		enc = streamJSONL(c, "outcomes.jsonl")
	}
	s.adminLog(c, store.LevelInfo, "outcomes", "exported %d outcomes (%d with the user's texts)", lines, texts)
	return err
}
