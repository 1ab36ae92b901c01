package main

import (
	"io"
	"os"
	"path/filepath"

	"github.com/mattn/go-isatty"

	"github.com/replyd/replyd/notify"
)

// otpCodeFile is where the console channel writes login codes when stderr is
// not a terminal (under systemd it is the journal, which must never hold one).
const otpCodeFile = "otp-code.txt"

// notifyConfig is the configuration of the OTP channel (REPLYD_OTP_CHANNEL
// and its settings) that sends the admin's login codes.
func notifyConfig(cfg *Config, stderr io.Writer) notify.Config {
	consoleFile := ""
	if f, ok := stderr.(*os.File); !ok || !isatty.IsTerminal(f.Fd()) {
		consoleFile = filepath.Join(cfg.DataDir, otpCodeFile)
	}
	return notify.Config{
		Channel:        cfg.OTPChannel,
		Console:        stderr,
		ConsoleFile:    consoleFile,
		WebhookURL:     cfg.OTPWebhookURL,
		TelegramToken:  cfg.TelegramBotToken,
		TelegramChatID: cfg.TelegramChatID,
		TelegramAPIURL: cfg.TelegramAPIURL,
		NtfyURL:        cfg.NtfyURL,
		NtfyToken:      cfg.NtfyToken,
		GotifyURL:      cfg.GotifyURL,
		GotifyToken:    cfg.GotifyToken,
	}
}
