package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Console shows the message to the administrator at the box. It never
// writes a code where the journal would keep it: with a terminal attached
// (Config.Console is one) it writes the line there; otherwise (under
// systemd, stderr goes to the journal) it writes it to Config.ConsoleFile,
// readable only by replyd's user, and tells the console only where to look.
// A login code replaces the file's content; an alert (empty code) is
// appended to it. This is the one place where the code is deliberately
// written out; it bypasses slog.
type Console struct {
	mu   sync.Mutex
	w    io.Writer
	file string
}

// Channel returns "console".
func (c *Console) Channel() string { return ChannelConsole }

// Send writes text (or DefaultText when it is empty) and a newline.
func (c *Console) Send(_ context.Context, code, text string, expiresAt time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := textOr(code, text, expiresAt) + "\n"
	if c.file == "" {
		if _, err := io.WriteString(c.w, line); err != nil {
			return fmt.Errorf("notify: console: write failed")
		}
		return nil
	}
	var err error
	what := "an alert was added to"
	if code == "" {
		err = appendPrivate(c.file, line)
	} else {
		what = "a login code was written to"
		err = replacePrivate(c.file, line)
	}
	if err != nil {
		// The path is the operator's own configuration, not a secret.
		return fmt.Errorf("notify: console: writing %s failed: %w", c.file, errors.Unwrap(err))
	}
	_, _ = fmt.Fprintf(c.w, "replyd: %s %s (readable only by replyd's user)\n", what, c.file)
	return nil
}

// replacePrivate makes path hold exactly data, mode 0600, by writing a
// temporary file beside it and renaming it over path.
func replacePrivate(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// appendPrivate appends data to path, creating it with mode 0600.
func appendPrivate(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Webhook POSTs {"code","text","expires_at"} as application/json to a URL.
type Webhook struct {
	url string
	h   httpSender
}

// webhookBody is the webhook's JSON; expires_at is RFC 3339 in UTC.
type webhookBody struct {
	Code      string    `json:"code"`
	Text      string    `json:"text"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Channel returns "webhook".
func (w *Webhook) Channel() string { return ChannelWebhook }

// Send POSTs the JSON and succeeds on any 2xx answer.
func (w *Webhook) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	body, err := json.Marshal(webhookBody{Code: code, Text: textOr(code, text, expiresAt), ExpiresAt: expiresAt.UTC()})
	if err != nil {
		return fmt.Errorf("notify: webhook: encode: %w", err)
	}
	_, err = w.h.post(ctx, ChannelWebhook, w.url, http.Header{"Content-Type": {"application/json"}}, body, code)
	return err
}

// Telegram sends the text to one chat with the Bot API's sendMessage.
type Telegram struct {
	base, token, chatID string
	h                   httpSender
}

// Channel returns "telegram".
func (t *Telegram) Channel() string { return ChannelTelegram }

// Send POSTs {"chat_id","text"} as JSON to {api_url}/bot{token}/sendMessage
// and succeeds on a 2xx answer whose JSON does not say "ok": false.
func (t *Telegram) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	body, err := json.Marshal(struct {
		ChatID string `json:"chat_id"`
		Text   string `json:"text"`
	}{t.chatID, textOr(code, text, expiresAt)})
	if err != nil {
		return fmt.Errorf("notify: telegram: encode: %w", err)
	}
	resp, err := t.h.post(ctx, ChannelTelegram, t.base+"/bot"+t.token+"/sendMessage",
		http.Header{"Content-Type": {"application/json"}}, body, code, t.token)
	if err != nil {
		return err
	}
	var answer struct {
		OK *bool `json:"ok"`
	}
	if json.Unmarshal(resp, &answer) == nil && answer.OK != nil && !*answer.OK {
		return fmt.Errorf("notify: telegram: the Bot API answered ok=false")
	}
	return nil
}

// Ntfy publishes the text to an ntfy topic URL with a title and high
// priority.
type Ntfy struct {
	url, token string
	h          httpSender
}

// NtfyPriority is the Priority header sent to ntfy ("high" = 4).
const NtfyPriority = "high"

// Channel returns "ntfy".
func (n *Ntfy) Channel() string { return ChannelNtfy }

// Send POSTs the text as text/plain with Title and Priority headers, and an
// Authorization: Bearer header when a token is configured.
func (n *Ntfy) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	header := http.Header{
		"Content-Type": {"text/plain; charset=utf-8"},
		"Title":        {Title},
		"Priority":     {NtfyPriority},
	}
	if n.token != "" {
		header.Set("Authorization", "Bearer "+n.token)
	}
	_, err := n.h.post(ctx, ChannelNtfy, n.url, header, []byte(textOr(code, text, expiresAt)), code, n.token)
	return err
}

// Gotify posts a message to a Gotify server as an application.
type Gotify struct {
	base, token string
	h           httpSender
}

// GotifyPriority is the message priority sent to Gotify (8 and above
// notify loudly on Android).
const GotifyPriority = 8

// Channel returns "gotify".
func (g *Gotify) Channel() string { return ChannelGotify }

// Send POSTs {"title","message","priority"} as JSON to
// {url}/message?token={token}.
func (g *Gotify) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	body, err := json.Marshal(struct {
		Title    string `json:"title"`
		Message  string `json:"message"`
		Priority int    `json:"priority"`
	}{Title, textOr(code, text, expiresAt), GotifyPriority})
	if err != nil {
		return fmt.Errorf("notify: gotify: encode: %w", err)
	}
	target := g.base + "/message?token=" + url.QueryEscape(g.token)
	_, err = g.h.post(ctx, ChannelGotify, target, http.Header{"Content-Type": {"application/json"}}, body,
		code, g.token, url.QueryEscape(g.token), strconv.Quote(g.token))
	return err
}
