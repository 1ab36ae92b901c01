package whisper

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The encoder's window. whisper.cpp's audio_ctx (whisper_full_params
// .audio_ctx, whisper-cli -ac N) makes the encoder work on N positions (50 a
// second) instead of the model's 1500 (30 s): its input is the window's
// first 2N mel frames, and the self- and cross-attention run over N. On a
// 4 s turn that is a tenth of the encoder's work. The mel, the decoder and
// every decoding rule are unchanged (../shared/testdata/whisper/
// reference-audio-ctx/README.md). Only audio that fits one window is
// shortened: a longer recording's windows keep the full 30 s.

// Window modes (Options.Window, REPLYD_WHISPER_WINDOW).
const (
	// WindowAuto chooses by the weights: WindowSpeech for weights made for
	// a short window (Options.ShortWindowWeights, SetShortWindowWeights), else the stock rule, a
	// floor of StockFloor and a margin of StockMargin.
	WindowAuto = "auto"
	// WindowSpeech is the dictation apps' rule, whatever the weights: the
	// speech's own positions plus SpeechMargin (FUTO Voice Input, voxtype
	// PR #82, Handy: ceil(seconds × 50) + 64).
	WindowSpeech = "speech"
	// WindowFull is the model's own 30 s window, always.
	WindowFull = "full"
	// WindowFloor is a window of at least Window.Floor, and the speech plus
	// StockMargin when that is longer.
	WindowFloor = "floor"
)

// Constants of the window rules (docs/speech.md says why these).
const (
	// SpeechMargin is the positions WindowSpeech adds to the speech's own.
	SpeechMargin = 64
	// StockFloor and StockMargin are the stock weights' rule: a window of
	// max(10 s, speech + 2 s), as transcribe.cpp's PR #149 keeps it (no
	// WER change on its 26-clip corpus); stock Whisper weights were trained
	// on 30 s windows only and repeat themselves on windows cut to the
	// speech (futo-org/whisper-acft's README: tiny.en 4.73% WER at 1500,
	// 225.99% with the dynamic window).
	StockFloor  = 10 * time.Second
	StockMargin = 2 * time.Second
	// positionsPerSecond: 1500 positions cover 30 s.
	positionsPerSecond = 50
)

// Window is the rule that sizes a transcription's encoder window.
type Window struct {
	Mode  string        // WindowAuto ("" too), WindowSpeech, WindowFull or WindowFloor
	Floor time.Duration // WindowFloor's shortest window
}

// ParseWindow reads REPLYD_WHISPER_WINDOW: auto (or empty), speech, full,
// or a floor in seconds ("10", "10s", "7.5").
func ParseWindow(s string) (Window, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "", WindowAuto:
		return Window{Mode: WindowAuto}, nil
	case WindowSpeech, WindowFull:
		return Window{Mode: s}, nil
	}
	sec, err := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64)
	if err != nil || math.IsNaN(sec) || sec <= 0 || sec > 30 {
		return Window{}, fmt.Errorf("whisper window %q: want auto, speech, full or a floor in seconds above 0 and up to 30", s)
	}
	return Window{Mode: WindowFloor, Floor: time.Duration(sec * float64(time.Second))}, nil
}

// String is the mode as ParseWindow reads it.
func (w Window) String() string {
	switch w.Mode {
	case "":
		return WindowAuto
	case WindowFloor:
		return strconv.FormatFloat(w.Floor.Seconds(), 'f', -1, 64) + "s"
	}
	return w.Mode
}

// ErrWindowTooLong is wrapped by the error of a transcription asked for an
// explicit audio_ctx (CallOptions.AudioCtx) on audio longer than one 30 s
// window: whisper.cpp would apply it to every window and lose audio.
var ErrWindowTooLong = errors.New("whisper: an explicit audio_ctx applies only to audio of one 30 s window")

// positions returns the encoder positions that cover d of audio.
func positions(d time.Duration) int {
	return int(math.Ceil(d.Seconds() * positionsPerSecond))
}

// audioCtx returns the encoder positions (audio_ctx) of a transcription of
// n samples under w, 0 meaning the model's full window: the full window
// for audio longer than one window, for WindowFull, and whenever the rule
// asks for the full window or more.
func (m *Model) audioCtx(n int, w Window) int {
	if n > chunkSamples {
		return 0
	}
	d := time.Duration(n) * time.Second / SampleRate
	mode := w.Mode
	floor := w.Floor
	if mode == "" || mode == WindowAuto {
		if m.shortWeights.Load() {
			mode = WindowSpeech
		} else {
			mode, floor = WindowFloor, StockFloor
		}
	}
	var ctx int
	switch mode {
	case WindowSpeech:
		ctx = positions(d) + SpeechMargin
	case WindowFloor:
		ctx = positions(max(floor, d+StockMargin))
	default:
		return 0
	}
	if ctx >= m.hp.NAudioCtx {
		return 0
	}
	return max(ctx, 1)
}

// describeWindow says what the window rule is for this model, for Status.
func (m *Model) describeWindow() string {
	w := m.opts.Window
	switch w.Mode {
	case "", WindowAuto:
		if m.shortWeights.Load() {
			return "auto: speech + 64 positions (weights made for a short window)"
		}
		return fmt.Sprintf("auto: max(%g s, speech + %g s) (stock weights)", StockFloor.Seconds(), StockMargin.Seconds())
	case WindowSpeech:
		return "speech: speech + 64 positions"
	case WindowFloor:
		return fmt.Sprintf("floor: max(%g s, speech + %g s)", w.Floor.Seconds(), StockMargin.Seconds())
	}
	return "full: 30 s"
}
