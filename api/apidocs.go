package api

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/store"
)

// The integration guide and the OpenAPI file are text/template sources
// rendered once in New with the server's Limits, so every number they state
// is the number the server enforces.
var (
	//go:embed client.md
	clientMDTemplate string
	//go:embed openapi.yaml
	openAPITemplate string
)

// docData are the values the documents are rendered with.
type docData struct {
	MaxBody              string
	MaxBodyBytes         int64
	MaxPayload           string
	MaxPayloadBytes      int64
	MaxJSONBody          string
	MaxAudioSeconds      int64
	MaxMessages          int
	MaxContentChars      int
	MaxProfileChars      int
	MaxIDChars           int
	PromptBudgetTokens   int
	PromptBudgetChars    int
	MaxCandidates        int
	DefaultCandidates    int
	DefaultTemperature   string
	MaxTemperature       string
	InferTimeoutSeconds  int64
	DefaultRateLimit     int
	MaxRateLimit         int
	DefaultListLimit     int
	MaxListLimit         int
	DefaultWindow        string
	DefaultWindowSeconds int64
	MaxWindow            string
	MaxSeriesBuckets     int
	MaxPromptChars       int
	MaxTimeWindowSec     int
	OTPTTLMinutes        int64
	OTPResendSeconds     int64
	OTPMaxAttempts       int
	SessionTTLHours      string
	OverloadedRetryAfter int64
	NotReadyRetryAfter   int64
	APIKeyPrefix         string
	MaxClientIDChars     int
	MaxVersionChars      int
	DefaultPromptVersion string

	// Login and the bounds on what one client may spend.
	OTPDigits             int
	TOTPDigits            int
	TOTPPeriodSeconds     int64
	OTPAddrFailMinutes    int64
	OTPGlobalFailures     int
	OTPLockMaxHours       int64
	OTPLockDecayHours     int64
	OTPSendBurst          int
	OTPSendRefillMinutes  int64
	OTPSendGlobalBurst    int
	OTPSendGlobalMinutes  int64
	OTPGlobalSources      int
	OTPCodeFailures       int
	OTPBound              otpBound
	OTPBoundSent          string
	OTPBoundTOTP          string
	AuthFailuresPerMinute int
	MaxInflightPerKey     int
	MaxConnsPerAddr       int
	UploadMemory          string
	MinBodyRate           string
	BodyRateGraceSeconds  int64
	MinFree               string
	MaxChannels           int
	MaxRateKHz            int
	PeakDecodeMiB         int64
	// Pairing and its throttle arithmetic (client.md).
	PairingTTLMinutes      int64
	PairingCodeLen         int
	PairingAlphabetSize    int
	PairingCodeSpace       string // 32^8, in words
	PairAttemptsPerAddress int
	PairAttemptsTotal      int
	MaxPendingPairings     int
	PairGuessesPerLifetime int    // the most guesses in one code's life
	PairOddsPerLifetime    string // chance that they find any pending code
	PairGuessesPerYear     int
	PairOddsPerYear        string
	CORSMaxAgeSeconds      int64
	// Live sessions (client.md, "Live session").
	Live liveDocs
}

func (s *Server) docData() docData {
	l := s.limits
	bound := otpAttackBound()
	return docData{
		MaxBody:              formatBytes(l.MaxBodyBytes),
		MaxBodyBytes:         l.MaxBodyBytes,
		MaxPayload:           formatBytes(l.MaxPayloadBytes),
		MaxPayloadBytes:      l.MaxPayloadBytes,
		MaxJSONBody:          formatBytes(l.MaxJSONBodyBytes),
		MaxAudioSeconds:      int64(l.MaxAudio / time.Second),
		MaxMessages:          l.MaxMessages,
		MaxContentChars:      l.MaxContentChars,
		MaxProfileChars:      l.MaxProfileChars,
		MaxIDChars:           l.MaxIDChars,
		PromptBudgetTokens:   l.PromptBudgetTokens,
		PromptBudgetChars:    l.PromptBudgetTokens * charsPerToken,
		MaxCandidates:        l.MaxCandidates,
		DefaultCandidates:    l.DefaultCandidates,
		DefaultTemperature:   strconv.FormatFloat(l.DefaultTemperature, 'g', -1, 64),
		MaxTemperature:       strconv.FormatFloat(l.MaxTemperature, 'g', -1, 64),
		InferTimeoutSeconds:  int64(l.InferTimeout / time.Second),
		DefaultRateLimit:     l.DefaultRateLimit,
		MaxRateLimit:         l.MaxRateLimit,
		DefaultListLimit:     l.DefaultListLimit,
		MaxListLimit:         l.MaxListLimit,
		DefaultWindow:        formatWindow(l.DefaultWindow),
		DefaultWindowSeconds: int64(l.DefaultWindow / time.Second),
		MaxWindow:            formatDays(l.MaxWindow),
		MaxSeriesBuckets:     l.MaxSeriesBuckets,
		MaxPromptChars:       l.MaxPromptChars,
		MaxTimeWindowSec:     maxTimeWindowSec,
		OTPTTLMinutes:        int64(l.OTPTTL / time.Minute),
		OTPResendSeconds:     int64(l.OTPResendInterval / time.Second),
		OTPMaxAttempts:       l.OTPMaxAttempts,
		SessionTTLHours:      strconv.FormatFloat(l.SessionTTL.Hours(), 'g', -1, 64),
		OverloadedRetryAfter: retryAfterSeconds(l.OverloadedRetryAfter),
		NotReadyRetryAfter:   retryAfterSeconds(l.NotReadyRetryAfter),
		APIKeyPrefix:         APIKeyPrefix,
		MaxClientIDChars:     maxClientIDChars,
		MaxVersionChars:      maxVersionChars,
		DefaultPromptVersion: DefaultPromptVersion,

		OTPDigits:             otpDigits,
		TOTPDigits:            totpDigits,
		TOTPPeriodSeconds:     int64(totpPeriod / time.Second),
		OTPAddrFailMinutes:    int64(otpAddrFailWindow / time.Minute),
		OTPGlobalFailures:     otpGlobalFailures,
		OTPLockMaxHours:       int64(otpLockMax / time.Hour),
		OTPLockDecayHours:     int64(otpLockDecay / time.Hour),
		OTPSendBurst:          otpSendBurst,
		OTPSendRefillMinutes:  int64(otpSendRefill / time.Minute),
		OTPSendGlobalBurst:    otpSendGlobalBurst,
		OTPSendGlobalMinutes:  int64(otpSendGlobalRefill / time.Minute),
		OTPGlobalSources:      otpGlobalSources,
		OTPCodeFailures:       otpCodeFailures,
		OTPBound:              bound,
		OTPBoundSent:          strconv.FormatFloat(bound.SentPercent, 'g', 2, 64),
		OTPBoundTOTP:          strconv.FormatFloat(bound.TOTPPercent, 'g', 2, 64),
		AuthFailuresPerMinute: l.AuthFailuresPerMinute,
		MaxInflightPerKey:     l.MaxInflightPerKey,
		MaxConnsPerAddr:       l.MaxConnsPerAddr,
		UploadMemory:          formatBytes(l.UploadMemoryBytes),
		MinBodyRate:           formatBytes(l.MinBodyRate),
		Live:                  s.liveDocData(),
		BodyRateGraceSeconds:  int64(l.BodyRateGrace / time.Second),
		MinFree:               formatBytes(l.MinFreeBytes),
		MaxChannels:           audio.MaxChannels,
		MaxRateKHz:            audio.MaxRate / 1000,
		// One decode holds the body, its mono samples at the source rate
		// (at most MaxAudio at MaxRate) and the 16 kHz result.
		PeakDecodeMiB:          (l.MaxBodyBytes + 4*int64(l.MaxAudio/time.Second)*(audio.MaxRate+audio.SampleRate)) >> 20,
		PairingTTLMinutes:      int64(l.PairingTTL / time.Minute),
		PairingCodeLen:         pairingCodeLen,
		PairingAlphabetSize:    len(pairingAlphabet),
		PairingCodeSpace:       sci(pairingCodeSpace),
		PairAttemptsPerAddress: l.PairAttemptsPerAddress,
		PairAttemptsTotal:      l.PairAttemptsTotal,
		MaxPendingPairings:     l.MaxPendingPairings,
		PairGuessesPerLifetime: pairGuesses(l),
		PairOddsPerLifetime:    sci(float64(pairGuesses(l)*l.MaxPendingPairings) / pairingCodeSpace),
		PairGuessesPerYear:     l.PairAttemptsTotal * 60 * 24 * 365,
		PairOddsPerYear:        sci(float64(l.PairAttemptsTotal*60*24*365*l.MaxPendingPairings) / pairingCodeSpace),
		CORSMaxAgeSeconds:      int64(corsMaxAge / time.Second),
	}
}

// pairGuesses is the most POST /v1/pair attempts the global throttle lets
// through during one code's life: it counts in fixed one-minute windows, and
// a life of n minutes touches at most n+1 of them.
func pairGuesses(l Limits) int {
	windows := int((l.PairingTTL+store.RateWindow-1)/store.RateWindow) + 1
	return l.PairAttemptsTotal * windows
}

// sci renders x as "3.0 × 10⁻⁹".
func sci(x float64) string {
	m, e := strconv.FormatFloat(x, 'e', 1, 64), ""
	if i := strings.IndexByte(m, 'e'); i >= 0 {
		m, e = m[:i], m[i+1:]
	}
	n, _ := strconv.Atoi(e)
	sup := strings.NewReplacer("-", "⁻", "0", "⁰", "1", "¹", "2", "²", "3", "³", "4", "⁴", "5", "⁵", "6", "⁶", "7", "⁷", "8", "⁸", "9", "⁹")
	return m + " × 10" + sup.Replace(strconv.Itoa(n))
}

// charsPerToken is the rule of thumb the guide uses to turn the prompt's
// token budget into characters: about 4 characters of English text a token
// with the tokenizers of current instruct models (fewer for other
// languages, so the guide says "about").
const charsPerToken = 4

// formatWindow renders a window as the shortest of "Nd", "Nh", "Nm" or a Go
// duration.
func formatWindow(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// renderDoc executes one document template with data.
func renderDoc(name, src string, data docData) ([]byte, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, fmt.Errorf("api: parsing %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("api: rendering %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// handleClientMD serves the integration guide rendered with the limits.
func (s *Server) handleClientMD(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", s.clientMD)
}

// handleOpenAPI serves the OpenAPI 3.1 description rendered with the limits.
func (s *Server) handleOpenAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, "application/yaml; charset=utf-8", s.openAPIYAML)
}
