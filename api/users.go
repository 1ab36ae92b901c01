package api

// The memory of users with remember: true, and the outcome export: admin
// only. Texts leave replyd only through these calls (and the backup); each
// export and deletion writes an admin log entry, which never holds text.

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

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
}

type usersResponse struct {
	Items []memoryUserJSON `json:"items"`
	Count int              `json:"count"`
}

// handleListUsers serves GET /v1/admin/users: every user with a memory, by
// pseudonym, with the number of pairs kept.
func (s *Server) handleListUsers(c echo.Context) error {
	users, err := s.store.MemoryUsers()
	if err != nil {
		return err
	}
	out := usersResponse{Items: make([]memoryUserJSON, 0, len(users))}
	for _, u := range users {
		out.Items = append(out.Items, memoryUserJSON{User: userLabel(u.Subject), Pairs: u.Pairs, CreatedAt: u.CreatedAt.UTC(), LastAt: optTime(u.LastAt)})
	}
	out.Count = len(out.Items)
	return c.JSON(http.StatusOK, out)
}

// userOf resolves the {user} path parameter: a listed pseudonym ("p_…"),
// else a user_id as tablets send it (URL-escaped in the path). It returns
// the subject and its pseudonym.
func (s *Server) userOf(c echo.Context) (string, string, error) {
	v := c.Param("user")
	if u, err := url.PathUnescape(v); err == nil {
		v = u
	}
	if v == "" {
		return "", "", badRequest("user is required: a pseudonym from /v1/admin/users or a user_id")
	}
	if strings.HasPrefix(v, pseudonymPrefix) {
		users, err := s.store.MemoryUsers()
		if err != nil {
			return "", "", err
		}
		for _, u := range users {
			if userLabel(u.Subject) == v {
				return u.Subject, v, nil
			}
		}
	}
	if len(v) > s.limits.MaxIDChars {
		return "", "", badRequest("user has more than %d characters", s.limits.MaxIDChars)
	}
	subj, err := s.pseudonym(v)
	if err != nil {
		return "", "", err
	}
	return subj, userLabel(subj), nil
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
	subj, pseudo, err := s.userOf(c)
	if err != nil {
		return err
	}
	pairs, rev, err := s.store.MemoryPairs(subj)
	if err != nil {
		return err
	}
	if rev == 0 {
		return errorf(CodeNotFound, "no remembered replies are kept for this user")
	}
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
	subj, pseudo, err := s.userOf(c)
	if err != nil {
		return err
	}
	d, err := s.store.DeleteUser(subj)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(CodeNotFound, "nothing is stored for this user")
	}
	if err != nil {
		return err
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
