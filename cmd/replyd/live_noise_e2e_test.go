package main

import (
	"bufio"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// TestLiveNoiseFilesCostNoWork streams, at real time, what a live session
// hears in a room where nobody speaks to the tablet: silence, mains hum
// (50 Hz), broadband noise (made with sox) and a television, a babble of
// four espeak-ng voices saying different sentences mixed by sox and lowered
// by 25 dB. It reads from /metrics that this costs no Whisper or
// language-model work (no live pass started, no transcription or
// generation observed) unless Silero VAD heard speech, and then exactly
// one final pass per turn it reported; and that the session held no more
// audio than its bound: the 224 ms pre-roll (and one window) while it
// heard nothing it took for speech.
func TestLiveNoiseFilesCostNoWork(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary and streams 20 s of audio")
	}
	sox := testutil.Tool(t, "sox", "the live session on noise made with sox")
	espeak := testutil.Tool(t, "espeak-ng", "the live session on a babble of espeak-ng voices")
	dir := t.TempDir()
	files := noiseFiles(t, dir, sox, espeak)

	const adminKey = "e2e-admin-key-live-noise-0123456789"
	lr := startLive(t, adminKey, "tablet-noise", "live-noise")
	p, ctx, c := lr.p, lr.ctx, lr.c
	admin := map[string]string{"X-ADMIN-KEY": adminKey}
	var mu sync.Mutex
	events := map[string]int{}
	go func() {
		for ev := range lr.events {
			mu.Lock()
			events[ev.Event]++
			mu.Unlock()
		}
	}()
	count := func(ev string) int {
		mu.Lock()
		defer mu.Unlock()
		return events[ev]
	}
	metrics := func() map[string]float64 {
		body := p.Must(replydproc.Request{Path: "/metrics", Header: admin}, 200)
		return promSamples(t, string(body))
	}

	window := float64(engine.VoiceWindow) / engine.LiveRate
	// The pre-roll, rounded up to whole windows (200 ms: 7, 224 ms).
	preRoll := math.Ceil(engine.DefaultTurnConfig().PreRoll.Seconds()/window) * window
	for _, f := range files {
		streamRealTime(ctx, t, c, f.pcm)
		// Long enough for a turn that ended with the file to be
		// reported, and its answer sent.
		time.Sleep(time.Second)
		for deadline := time.Now().Add(2 * time.Minute); count("end_of_turn") > count("candidates")+count("error") && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		m := metrics()
		held := m[`replyd_live_audio_held_peak_seconds{state="listening"}`]
		t.Logf("after %-10s speech_start %d, end_of_turn %d, candidates %d; passes: speculative %v, final %v; transcriptions %v, generations %v; most audio held while listening %.3f s, in a turn %.3f s",
			f.name, count("speech_start"), count("end_of_turn"), count("candidates"),
			m[`replyd_live_passes_total{kind="speculative"}`], m[`replyd_live_passes_total{kind="final"}`],
			m[`replyd_inference_stage_seconds_count{stage="stt"}`], m[`replyd_inference_stage_seconds_count{stage="generation"}`],
			held, m[`replyd_live_audio_held_peak_seconds{state="turn"}`])
		if f.quiet && count("speech_start") == 0 && held > preRoll+window+1e-9 {
			t.Errorf("after %s: the session held %.3f s while listening, want at most the %.3f s pre-roll and a window", f.name, held, preRoll)
		}
	}
	_ = c.Close(websocket.StatusNormalClosure, "")

	m := metrics()
	turns := count("speech_start")
	spec, final := m[`replyd_live_passes_total{kind="speculative"}`], m[`replyd_live_passes_total{kind="final"}`]
	stt, gen := m[`replyd_inference_stage_seconds_count{stage="stt"}`], m[`replyd_inference_stage_seconds_count{stage="generation"}`]
	if turns == 0 {
		// Silero heard no speech: nothing but voice detection ran.
		if spec+final+stt+gen != 0 || count("end_of_turn")+count("candidates") != 0 {
			t.Errorf("no turn was reported, yet passes speculative %v final %v, transcriptions %v, generations %v, events %v", spec, final, stt, gen, events)
		}
		if held := m[`replyd_live_audio_held_peak_seconds{state="turn"}`]; held != 0 {
			t.Errorf("no turn, yet a turn held %v s", held)
		}
	} else {
		// Silero heard the television as speech: that is the detector's
		// call, and then each turn it reported costs one final pass.
		t.Logf("Silero VAD heard speech in the noise: %d turns", turns)
		if int(final) != count("end_of_turn") || count("end_of_turn") != turns || stt > final || gen > final {
			t.Errorf("turns reported %d, end_of_turn %d; passes: final %v, speculative %v; transcriptions %v, generations %v: want one final pass per turn and no work beyond them",
				turns, count("end_of_turn"), final, spec, stt, gen)
		}
	}
	// A candidate turn (speech shorter than MinSpeech) holds at most the
	// pre-roll and, per window of speech short of MinSpeech, the window
	// and the silence that does not end it yet.
	cfg := engine.DefaultTurnConfig()
	speechWindows := int(cfg.MinSpeech.Seconds()/window+0.999) - 1
	silenceWindows := int(cfg.EndSilence.Seconds()/window+0.999) - 1
	bound := preRoll + float64(speechWindows*(1+silenceWindows)+1)*window
	if held := m[`replyd_live_audio_held_peak_seconds{state="listening"}`]; held > bound {
		t.Errorf("the session held %.3f s outside a turn, over its bound of %.3f s", held, bound)
	}
}

// noiseFile is one file of noise, as 16-bit samples; quiet files must
// never hold more than the pre-roll.
type noiseFile struct {
	name  string
	pcm   []byte
	quiet bool
}

// noiseFiles makes, with sox and espeak-ng, 4 s of silence, of 50 Hz hum
// and of white noise, and 6 s of television babble: four voices saying
// different sentences, mixed and lowered by 25 dB; then the silence
// again.
func noiseFiles(t *testing.T, dir, sox, espeak string) []noiseFile {
	t.Helper()
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	format := []string{"-r", "16000", "-b", "16", "-c", "1"}
	synth := func(name string, effect ...string) string {
		out := filepath.Join(dir, name+".wav")
		run(sox, append(append(append([]string{"-n"}, format...), out), effect...)...)
		return out
	}
	silence := synth("silence", "trim", "0", "4")
	hum := synth("hum", "synth", "4", "sine", "50", "vol", "0.1")
	white := synth("whitenoise", "synth", "4", "whitenoise", "vol", "0.05")

	voices := []struct{ voice, speed, text string }{
		{"en-us", "160", "And now the weather for the rest of the week, with rain spreading from the west by Thursday."},
		{"en-gb+f3", "170", "The match was level at half time, but the visitors scored twice in the last ten minutes."},
		{"en-gb-scotland", "150", "Add the flour slowly, stirring all the time, until the sauce is thick and smooth."},
		{"en-us+m5", "180", "Tonight on the programme we ask whether the new bridge was worth what it cost."},
	}
	var parts []string
	for i, v := range voices {
		raw := filepath.Join(dir, "voice"+strconv.Itoa(i)+".raw.wav")
		run(espeak, "-v", v.voice, "-s", v.speed, "-w", raw, v.text)
		part := filepath.Join(dir, "voice"+strconv.Itoa(i)+".wav")
		// Each voice starts a little later than the one before.
		run(sox, append(append([]string{raw}, format...), part, "pad", strconv.FormatFloat(0.3*float64(i), 'f', 1, 64), "0")...)
		parts = append(parts, part)
	}
	babble := filepath.Join(dir, "babble.wav")
	run(sox, append(append(append([]string{"-m"}, parts...), format...), babble, "trim", "0", "6", "vol", "-25dB")...)

	var out []noiseFile
	for _, f := range []struct {
		name, path string
		quiet      bool
	}{{"silence", silence, true}, {"hum", hum, true}, {"whitenoise", white, true}, {"television", babble, false}} {
		raw := filepath.Join(dir, f.name+".s16")
		run(sox, f.path, "-t", "raw", "-e", "signed", "-b", "16", "-L", raw)
		b, err := os.ReadFile(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, noiseFile{name: f.name, pcm: b, quiet: f.quiet})
	}
	// Silence after the television: a turn Silero heard in it ends.
	return append(out, noiseFile{name: "silence", pcm: out[0].pcm})
}

// streamRealTime sends 16-bit little-endian samples in frames of 100 ms,
// one every 100 ms: a microphone's pace.
func streamRealTime(ctx context.Context, t *testing.T, c *websocket.Conn, s16 []byte) {
	t.Helper()
	const frame = 2 * engine.LiveRate / 10
	next := time.Now()
	for len(s16) > 0 {
		n := min(frame, len(s16))
		if err := c.Write(ctx, websocket.MessageBinary, s16[:n]); err != nil {
			t.Fatal(err)
		}
		s16 = s16[n:]
		next = next.Add(100 * time.Millisecond)
		time.Sleep(time.Until(next))
	}
}

// promSamples reads a Prometheus text exposition into sample name (with
// its labels) -> value.
func promSamples(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}
