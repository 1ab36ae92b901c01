// Package notify delivers the admin's one-time login code (and alerts such
// as "login by code is paused", sent with an empty code) through one
// channel: the console (a terminal when one is attached, otherwise a file
// in the data directory readable only by replyd's user: never the journal),
// a generic JSON webhook, Telegram's Bot API, ntfy or Gotify. It does not import api;
// every type it returns has the method set of api.Notifier, and cmd/replyd
// wires them together.
//
// Errors never contain the code, the message text, a token or a configured
// URL (ntfy topics and webhook paths are often secrets themselves): they name
// the channel and, for an HTTP answer, its status.
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Channel names accepted in Config.Channel.
const (
	ChannelConsole  = "console"
	ChannelWebhook  = "webhook"
	ChannelTelegram = "telegram"
	ChannelNtfy     = "ntfy"
	ChannelGotify   = "gotify"
)

// The environment variables of the settings: cmd/replyd reads them (its
// option table uses these names), errors from Validate name them.
const (
	EnvChannel        = "REPLYD_OTP_CHANNEL"
	EnvWebhookURL     = "REPLYD_OTP_WEBHOOK_URL"
	EnvTelegramToken  = "REPLYD_TELEGRAM_BOT_TOKEN"
	EnvTelegramChatID = "REPLYD_TELEGRAM_CHAT_ID"
	EnvTelegramAPIURL = "REPLYD_TELEGRAM_API_URL"
	EnvNtfyURL        = "REPLYD_NTFY_URL"
	EnvNtfyToken      = "REPLYD_NTFY_TOKEN"
	EnvGotifyURL      = "REPLYD_GOTIFY_URL"
	EnvGotifyToken    = "REPLYD_GOTIFY_TOKEN"
)

// DefaultTimeout bounds one delivery when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// DefaultTelegramAPIURL is the Bot API base used when Config.TelegramAPIURL
// is empty.
const DefaultTelegramAPIURL = "https://api.telegram.org"

// Title is the title or subject the channels that have one show.
const Title = "replyd admin login code"

// ErrConfig marks a configuration error from Validate or New.
var ErrConfig = errors.New("invalid OTP channel configuration")

// Notifier delivers a code. It is the method set of api.Notifier.
type Notifier interface {
	// Channel names the channel ("console", "webhook", ...).
	Channel() string
	// Send delivers text, which contains code, before expiresAt. It never
	// logs the code and its errors never contain it.
	Send(ctx context.Context, code, text string, expiresAt time.Time) error
}

// Config selects and configures the channel. cmd/replyd fills it from flags
// and the REPLYD_* variables named by the Env… constants.
type Config struct {
	// Channel is one of the Channel… names; empty means console.
	Channel string
	// Console receives the console channel's lines; nil means os.Stderr.
	// When ConsoleFile is set, Console only learns where the code went.
	Console io.Writer
	// ConsoleFile, when set, is where the console channel writes codes
	// (mode 0600) instead of Console: cmd sets it when stderr is not a
	// terminal, so that no code reaches the journal.
	ConsoleFile string

	WebhookURL string // webhook: where the JSON is POSTed

	TelegramToken  string // telegram: the bot token
	TelegramChatID string // telegram: the admin's chat id (or @channel)
	TelegramAPIURL string // telegram: Bot API base; empty means DefaultTelegramAPIURL (a LAN relay may stand in)

	NtfyURL   string // ntfy: the topic URL, e.g. http://ntfy.lan/replyd-admin
	NtfyToken string // ntfy: optional access token, sent as a Bearer token

	GotifyURL   string // gotify: the server's base URL
	GotifyToken string // gotify: the application token

	// Timeout bounds one Send; zero means DefaultTimeout.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means a client with Timeout that
	// does not follow redirects (a redirect is reported as an error, so a
	// token never travels to a host that was not configured).
	HTTPClient *http.Client
}

// Validate reports, wrapping ErrConfig, an unknown channel or a missing or
// malformed setting the chosen channel needs. Its messages name the
// variable, never its value.
func (c Config) Validate() error {
	switch c.channel() {
	case ChannelConsole:
		return nil
	case ChannelWebhook:
		return checkURL(EnvWebhookURL, c.WebhookURL)
	case ChannelTelegram:
		if c.TelegramToken == "" {
			return configError("channel telegram needs %s", EnvTelegramToken)
		}
		if strings.ContainsAny(c.TelegramToken, "/?#") {
			return configError("%s is not a bot token", EnvTelegramToken)
		}
		if c.TelegramChatID == "" {
			return configError("channel telegram needs %s", EnvTelegramChatID)
		}
		if c.TelegramAPIURL != "" {
			return checkURL(EnvTelegramAPIURL, c.TelegramAPIURL)
		}
		return nil
	case ChannelNtfy:
		return checkURL(EnvNtfyURL, c.NtfyURL)
	case ChannelGotify:
		if err := checkURL(EnvGotifyURL, c.GotifyURL); err != nil {
			return err
		}
		if c.GotifyToken == "" {
			return configError("channel gotify needs %s", EnvGotifyToken)
		}
		return nil
	}
	return configError("%s: unknown channel %q (want console, webhook, telegram, ntfy or gotify)", EnvChannel, c.Channel)
}

func (c Config) channel() string {
	if c.Channel == "" {
		return ChannelConsole
	}
	return c.Channel
}

func configError(format string, args ...any) error {
	return fmt.Errorf("notify: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// checkURL requires an absolute http or https URL without echoing it.
func checkURL(env, raw string) error {
	if raw == "" {
		return configError("the chosen channel needs %s", env)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return configError("%s must be an absolute http:// or https:// URL", env)
	}
	return nil
}

// New validates cfg and returns the Notifier for its channel.
func New(cfg Config) (Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{
			Timeout: cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	h := httpSender{client: cfg.HTTPClient, timeout: cfg.Timeout}
	switch cfg.channel() {
	case ChannelWebhook:
		return &Webhook{url: cfg.WebhookURL, h: h}, nil
	case ChannelTelegram:
		base := cfg.TelegramAPIURL
		if base == "" {
			base = DefaultTelegramAPIURL
		}
		return &Telegram{base: strings.TrimRight(base, "/"), token: cfg.TelegramToken, chatID: cfg.TelegramChatID, h: h}, nil
	case ChannelNtfy:
		return &Ntfy{url: cfg.NtfyURL, token: cfg.NtfyToken, h: h}, nil
	case ChannelGotify:
		return &Gotify{base: strings.TrimRight(cfg.GotifyURL, "/"), token: cfg.GotifyToken, h: h}, nil
	}
	w := cfg.Console
	if w == nil {
		w = os.Stderr
	}
	return &Console{w: w, file: cfg.ConsoleFile}, nil
}

// DefaultText is the message sent when the caller passes an empty text.
func DefaultText(code string, expiresAt time.Time) string {
	return fmt.Sprintf("replyd admin login code: %s (valid until %s)", code, expiresAt.UTC().Format("15:04:05 UTC"))
}

func textOr(code, text string, expiresAt time.Time) string {
	if text == "" {
		return DefaultText(code, expiresAt)
	}
	return text
}

// StatusError is a non-2xx answer from a channel's server.
type StatusError struct {
	Channel    string
	StatusCode int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("notify: %s: server answered %d %s", e.Channel, e.StatusCode, http.StatusText(e.StatusCode))
}

// sendError is a failed delivery whose message has had every secret removed.
// It unwraps only to context.DeadlineExceeded or context.Canceled, never to
// the original error, whose text may hold a URL with a token in it.
type sendError struct {
	msg   string
	cause error
}

func (e *sendError) Error() string { return e.msg }
func (e *sendError) Unwrap() error { return e.cause }

// deliveryError describes err from sending on channel without any of the
// secrets.
func deliveryError(channel string, err error, timeout time.Duration, secrets ...string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &sendError{msg: fmt.Sprintf("notify: %s: no answer within %s", channel, timeout), cause: context.DeadlineExceeded}
	case errors.Is(err, context.Canceled):
		return &sendError{msg: fmt.Sprintf("notify: %s: canceled", channel), cause: context.Canceled}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		if uerr.Timeout() {
			return &sendError{msg: fmt.Sprintf("notify: %s: no answer within %s", channel, timeout), cause: context.DeadlineExceeded}
		}
		err = uerr.Err // drop the URL
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return &sendError{msg: fmt.Sprintf("notify: %s: request failed: %s", channel, msg)}
}

// httpSender does one bounded POST and checks its status.
type httpSender struct {
	client  *http.Client
	timeout time.Duration
}

// post sends body to rawURL with the headers and returns the response body
// (at most 64 KiB, for callers that inspect it) when the status is 2xx.
func (h httpSender) post(ctx context.Context, channel, rawURL string, header http.Header, body []byte, secrets ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	secrets = append(secrets, rawURL)
	if u, err := url.Parse(rawURL); err == nil {
		secrets = append(secrets, u.RawQuery, u.User.String())
		if len(u.Path) > 1 { // a bare "/" is no secret, and replacing it would garble the message
			secrets = append(secrets, u.Path)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return nil, deliveryError(channel, err, h.timeout, secrets...)
	}
	req.Header = header
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, deliveryError(channel, err, h.timeout, secrets...)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{Channel: channel, StatusCode: resp.StatusCode}
	}
	return data, nil
}
