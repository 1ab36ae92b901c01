package audio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}

// TestDecodeWAVSine decodes a one-second 440 Hz sine written in every
// supported WAV layout. The channels carry the sine plus a 3 kHz tone of
// alternating sign, which only a true mean of the channels cancels. The
// result must be 16000 samples that match a 440 Hz sine generated at 16 kHz
// in phase and amplitude.
func TestDecodeWAVSine(t *testing.T) {
	var specs []testaudio.Format
	for _, rate := range []int{8000, 16000, 22050, 44100, 48000} {
		for _, ch := range []int{1, 2, 6} {
			specs = append(specs,
				testaudio.Format{Bits: 8, Rate: rate, Channels: ch},
				testaudio.Format{Bits: 16, Rate: rate, Channels: ch},
				testaudio.Format{Bits: 24, Rate: rate, Channels: ch},
				testaudio.Format{Bits: 32, Rate: rate, Channels: ch},
				testaudio.Format{Bits: 32, Float: true, Rate: rate, Channels: ch},
			)
		}
	}
	specs = append(specs,
		testaudio.Format{Bits: 64, Float: true, Rate: 44100, Channels: 1},
		testaudio.Format{Bits: 16, Extensible: true, Rate: 48000, Channels: 6},
		testaudio.Format{Bits: 24, Extensible: true, Rate: 44100, Channels: 2},
		testaudio.Format{Bits: 32, Float: true, Extensible: true, Rate: 48000, Channels: 2},
	)
	want := testaudio.Sine(440, SampleRate, SampleRate, 0.5)
	for _, s := range specs {
		t.Run(s.String(), func(t *testing.T) {
			tone := testaudio.Sine(440, s.Rate, s.Rate, 0.5)
			hum := testaudio.Sine(3000, s.Rate, s.Rate, 0.3)
			chans := make([][]float32, s.Channels)
			for c := range chans {
				chans[c] = make([]float32, s.Rate)
				sign := float32(1)
				if c%2 == 1 {
					sign = -1
				}
				for i := range chans[c] {
					if s.Channels == 1 {
						chans[c][i] = tone[i]
					} else {
						chans[c][i] = tone[i] + sign*hum[i]
					}
				}
			}
			data := testaudio.WAV(s, chans)
			if f := Detect(data); f != FormatWAV {
				t.Fatalf("Detect = %q", f)
			}
			pcm, err := Decode(data, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(pcm) != SampleRate {
				t.Fatalf("got %d samples, want %d", len(pcm), SampleRate)
			}
			// Skip the edges, where the resampler sees zeros beyond the
			// signal.
			mid, ref := pcm[400:len(pcm)-400], want[400:len(want)-400]
			c, lag := correlation(ref, mid, 4)
			if c < 0.9995 || lag != 0 {
				t.Errorf("correlation with a 16 kHz 440 Hz sine = %.5f at lag %d, want ≥ 0.9995 at 0", c, lag)
			}
			if r, w := rms(mid), 0.5/math.Sqrt2; math.Abs(r/w-1) > 0.01 {
				t.Errorf("RMS %.4f, want %.4f ± 1%%", r, w)
			}
		})
	}
}

// TestResampleStopband checks that tones above the lower Nyquist frequency
// are suppressed rather than aliased into the speech band, and that tones
// well inside the passband keep their level.
func TestResampleStopband(t *testing.T) {
	cases := []struct {
		from       int
		freq       float64
		minAttenDB float64 // for stopband tones; 0 means passband
	}{
		{48000, 8200, 80},
		{48000, 8800, 80},
		{48000, 10000, 80},
		{48000, 15000, 80},
		{44100, 9000, 70},
		{44100, 20000, 80},
		{22050, 10000, 80},
		{48000, 1000, 0},
		{44100, 6000, 0},
		{8000, 3000, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dHz-tone-%.0fHz", c.from, c.freq), func(t *testing.T) {
			in := testaudio.Sine(c.freq, c.from, c.from, 0.9)
			out := Resample(in, c.from, SampleRate)
			if len(out) != SampleRate {
				t.Fatalf("len = %d, want %d", len(out), SampleRate)
			}
			mid := out[800 : len(out)-800]
			ratio := rms(mid) / (0.9 / math.Sqrt2)
			if c.minAttenDB == 0 {
				if db := 20 * math.Log10(ratio); math.Abs(db) > 0.1 {
					t.Errorf("passband tone changed level by %.3f dB", db)
				}
				return
			}
			if atten := -20 * math.Log10(ratio); atten < c.minAttenDB {
				t.Errorf("stopband tone attenuated by %.1f dB, want ≥ %.0f dB", atten, c.minAttenDB)
			}
		})
	}
}

// TestResampleRates checks lengths and a round trip at rates that share
// few factors with 16 kHz, where the phase table is rounded.
func TestResampleRates(t *testing.T) {
	for _, from := range []int{8000, 11025, 12000, 32000, 44101, 96000} {
		in := testaudio.Sine(700, from, from/2, 0.5)
		out := Resample(in, from, SampleRate)
		if want := len(in) * SampleRate / from; len(out) != want {
			t.Errorf("%d Hz: len = %d, want %d", from, len(out), want)
		}
		ref := testaudio.Sine(700, SampleRate, len(out), 0.5)
		if c, lag := correlation(ref[200:len(ref)-200], out[200:len(out)-200], 2); c < 0.9999 || lag != 0 {
			t.Errorf("%d Hz: correlation %.6f at lag %d", from, c, lag)
		}
	}
	if got := Resample([]float32{1, 2}, 0, 16000); got != nil {
		t.Errorf("Resample with rate 0 = %v, want nil", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	tone := testaudio.Sine(440, 8000, 8000*3, 0.5)
	threeSec := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{tone})
	silent := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{{}})
	alaw := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{tone[:100]})
	binary.LittleEndian.PutUint16(alaw[20:], 6)
	huge := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{tone[:800]})
	binary.LittleEndian.PutUint32(huge[len(huge)-1600-4:], 0xFFFFFFF0) // data claims 4 GB
	badRate := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{tone[:100]})
	binary.LittleEndian.PutUint32(badRate[24:], 4_000_000_000)

	cases := []struct {
		name string
		data []byte
		max  time.Duration
		want error
	}{
		{"zero bytes", nil, time.Minute, ErrEmpty},
		{"no samples", silent, time.Minute, ErrEmpty},
		{"longer than max", threeSec, 2 * time.Second, ErrTooLong},
		{"non-positive max", threeSec, 0, ErrTooLong},
		{"garbage", []byte("SECRET garbage that is no audio format at all"), time.Minute, ErrUnsupported},
		{"ogg vorbis", append([]byte("OggS\x00\x02"), make([]byte, 40)...), time.Minute, ErrUnsupported},
		{"a-law wav", alaw, time.Minute, ErrUnsupported},
		{"absurd rate", badRate, time.Minute, ErrUnsupported},
		{"riff header only", []byte("RIFF\x04\x00\x00\x00WAVE"), time.Minute, ErrCorrupt},
		{"wav without data", threeSec[:36], time.Minute, ErrCorrupt},
		{"flac magic only", []byte("fLaCSECRET"), time.Minute, ErrCorrupt},
		{"id3 larger than file", []byte("ID3\x04\x00\x00\x7f\x7f\x7f\x7fSECRET"), time.Minute, ErrCorrupt},
		{"mp3 header only", []byte{0xFF, 0xFB, 0x90, 0x64}, time.Minute, ErrCorrupt},
		{"ogg opus head truncated", oggPageBytes(2, 0, []byte("OpusHead\x01")), time.Minute, ErrCorrupt},
		{"webm without tracks", []byte{0x1A, 0x45, 0xDF, 0xA3, 0x80}, time.Minute, ErrCorrupt},
		{"webm opus-less", webmWithCodec("V_VP8"), time.Minute, ErrUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pcm, err := Decode(c.data, c.max)
			if !errors.Is(err, c.want) {
				t.Fatalf("Decode = %d samples, %v; want %v", len(pcm), err, c.want)
			}
			msg := err.Error()
			if strings.Contains(msg, "SECRET") || !strings.HasPrefix(msg, c.want.Error()+": ") {
				t.Errorf("message %q must start with %q and not quote the input", msg, c.want.Error()+": ")
			}
		})
	}

	// A data chunk claiming more than the file holds is a truncated
	// recording: refused, never decoded in part.
	if pcm, err := Decode(huge, time.Minute); !errors.Is(err, ErrCorrupt) {
		t.Errorf("WAV with a 4 GB data size: %d samples, %v; want ErrCorrupt", len(pcm), err)
	}
	// The streaming writers' sizes 0 and 0xFFFFFFFF read to the end of the file.
	for _, size := range []uint32{0, 0xFFFFFFFF} {
		binary.LittleEndian.PutUint32(huge[len(huge)-1600-4:], size)
		if pcm, err := Decode(huge, time.Minute); err != nil || len(pcm) != 1600 {
			t.Errorf("WAV with data size %#x: %d samples, %v; want 1600, nil", size, len(pcm), err)
		}
	}
	// A header with a data chunk that declares one second and holds none.
	full := testaudio.Mono16(16000, make([]float32, 16000))
	headerOnly := full[:len(full)-32000]
	if pcm, err := Decode(headerOnly, time.Minute); !errors.Is(err, ErrCorrupt) {
		t.Errorf("WAV header only: %d samples, %v; want ErrCorrupt", len(pcm), err)
	}
}

// TestDecodeM4AWithoutFFmpeg checks the message a server without ffmpeg
// gives for M4A uploads.
func TestDecodeM4AWithoutFFmpeg(t *testing.T) {
	data := []byte("\x00\x00\x00\x1cftypM4A \x00\x00\x02\x00M4A isomiso2")
	if f := Detect(data); f != FormatM4A {
		t.Fatalf("Detect = %q, want m4a", f)
	}
	_, err := decodeM4A(data, time.Minute, "", "")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "M4A/AAC needs ffmpeg, which is not installed") {
		t.Errorf("err = %v", err)
	}
}

// TestDecodeTooLongBoundedMemory checks that a recording far longer than
// max is refused without decoding it: a 60 s WAV against a 1 s limit
// allocates far less than its 3.8 MB of samples would take as float32.
func TestDecodeTooLongBoundedMemory(t *testing.T) {
	n := 32000 * 60
	data := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 32000, Channels: 1}, [][]float32{make([]float32, n)})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Decode(data, time.Second)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("refusing the long WAV allocated %d bytes, want < 64 KiB", d)
	}
}

// TestDecodeTooLongFormats checks that every format, including those
// decoded frame by frame, refuses the 5.5 s reference sentence against a
// 2 s limit.
func TestDecodeTooLongFormats(t *testing.T) {
	dir := filepath.Join(shareddata.Whisper(t), "audio-formats")
	files, err := filepath.Glob(filepath.Join(dir, "speech.*"))
	if err != nil || len(files) != 8 {
		t.Fatalf("found %d format files (%v), want 8", len(files), err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if Detect(data) == FormatM4A && lookFFmpeg() == "" {
			continue
		}
		if _, err := Decode(data, 2*time.Second); !errors.Is(err, ErrTooLong) {
			t.Errorf("%s: err = %v, want ErrTooLong", filepath.Base(path), err)
		}
	}
}

func TestDetect(t *testing.T) {
	cases := []struct {
		data string
		want Format
	}{
		{"RIFF\x00\x00\x00\x00WAVEfmt ", FormatWAV},
		{"RIFF\x00\x00\x00\x00AVI LIST", FormatUnknown},
		{string(oggPageBytes(2, 0, []byte("OpusHead\x01\x01\x38\x01"))), FormatOggOpus},
		{string(oggPageBytes(2, 0, []byte("\x01vorbis"))), FormatUnknown},
		{"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01", FormatWebMOpus},
		{"fLaC\x00\x00\x00\x22", FormatFLAC},
		{"ID3\x04\x00\x00\x00\x00\x00\x00fLaC", FormatFLAC},
		{"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64", FormatMP3},
		{"\xff\xfb\x90\x64", FormatMP3},
		{"\xff\xf1\x50\x80", FormatUnknown}, // ADTS AAC
		{"\x00\x00\x00\x20ftypisom", FormatM4A},
		{"", FormatUnknown},
		{"hello", FormatUnknown},
	}
	for _, c := range cases {
		if got := Detect([]byte(c.data)); got != c.want {
			t.Errorf("Detect(%q) = %q, want %q", c.data, got, c.want)
		}
	}
}

// oggPageBytes builds one Ogg page with the given header type and granule
// holding body as a single packet.
func oggPageBytes(headerType byte, granule int64, body []byte) []byte {
	var b []byte
	b = append(b, "OggS\x00"...)
	b = append(b, headerType)
	b = binary.LittleEndian.AppendUint64(b, uint64(granule))
	b = append(b, 1, 0, 0, 0) // serial
	b = append(b, 0, 0, 0, 0) // sequence
	b = append(b, 0, 0, 0, 0) // CRC, not checked
	var seg []byte
	n := len(body)
	for n >= 255 {
		seg = append(seg, 255)
		n -= 255
	}
	seg = append(seg, byte(n))
	b = append(b, byte(len(seg)))
	b = append(b, seg...)
	return append(b, body...)
}

// webmWithCodec builds a WebM file with one track of the given codec and one
// SimpleBlock, in unknown-size Segment and Cluster elements.
func webmWithCodec(codec string) []byte {
	el := func(id []byte, body []byte) []byte {
		out := append([]byte{}, id...)
		out = append(out, 0x80|byte(len(body))) // 1-byte size; bodies here are < 127
		return append(out, body...)
	}
	unknown := []byte{0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	var b []byte
	b = append(b, el([]byte{0x1A, 0x45, 0xDF, 0xA3}, el([]byte{0x42, 0x82}, []byte("webm")))...)
	b = append(b, 0x18, 0x53, 0x80, 0x67)
	b = append(b, unknown...)
	entry := el([]byte{0xD7}, []byte{1})
	entry = append(entry, el([]byte{0x86}, []byte(codec))...)
	b = append(b, el([]byte{0x16, 0x54, 0xAE, 0x6B}, el([]byte{0xAE}, entry))...)
	b = append(b, 0x1F, 0x43, 0xB6, 0x75)
	b = append(b, unknown...)
	b = append(b, el([]byte{0xA3}, []byte{0x81, 0, 0, 0x80, 0xF8, 0xFF, 0xFE})...)
	return b
}

// TestDecodeM4AMoovPlacement decodes two seconds of a 440 Hz tone encoded
// by ffmpeg with the moov box last (as phones record; read from a temporary
// file) and first (faststart; piped), each long enough that ffmpeg could not
// read a moov-last file from a pipe.
func TestDecodeM4AMoovPlacement(t *testing.T) {
	ff := lookFFmpeg()
	if ff == "" {
		t.Skip("ffmpeg is not installed")
	}
	for _, faststart := range []bool{false, true} {
		t.Run(fmt.Sprintf("faststart=%v", faststart), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tone.m4a")
			args := []string{"-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "sine=f=440:d=40:sample_rate=48000",
				"-c:a", "aac", "-b:a", "96k"}
			if faststart {
				args = append(args, "-movflags", "+faststart")
			}
			if msg, err := exec.Command(ff, append(args, out)...).CombinedOutput(); err != nil {
				t.Fatalf("ffmpeg: %v: %s", err, msg)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if moovFirst(data) != faststart {
				t.Fatalf("moovFirst = %v, want %v", !faststart, faststart)
			}
			pcm, err := Decode(data, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if d := float64(len(pcm))/SampleRate - 40; math.Abs(d) > 0.1 {
				t.Errorf("duration off by %.3f s", d)
			}
			ref := testaudio.Sine(440, SampleRate, 16000, 0.125)
			if c, _ := correlation(ref, pcm[16000:32000], 40); c < 0.99 {
				t.Errorf("correlation with the tone = %.4f", c)
			}
			if _, err := Decode(data, 10*time.Second); !errors.Is(err, ErrTooLong) {
				t.Errorf("with a 10 s limit: err = %v, want ErrTooLong", err)
			}
			// The temporary copy goes to the Decoder's folder and is gone
			// afterwards; a piped file needs none.
			tmp := t.TempDir()
			if _, err := (Decoder{TempDir: tmp}).Decode(data, time.Minute); err != nil {
				t.Fatal(err)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("%d files left in the temporary folder", len(left))
			}
			_, err = (Decoder{TempDir: filepath.Join(tmp, "missing")}).Decode(data, time.Minute)
			if faststart != (err == nil) {
				t.Errorf("with a missing temporary folder: err = %v (faststart %v)", err, faststart)
			}
		})
	}
}

func TestPrepareTempDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmp")
	if n, err := PrepareTempDir(dir); err != nil || n != 0 {
		t.Fatalf("fresh: %d, %v", n, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"replyd-upload-1.m4a", "replyd-upload-2.m4a"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("recording"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(dir, "not-ours.txt")
	if err := os.WriteFile(keep, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := PrepareTempDir(dir)
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, tempPattern))
	if len(left) != 0 {
		t.Errorf("left %v", left)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file that is not an upload copy was removed: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
}

// TestDecodeMultichannelViaFFmpeg encodes three seconds of real stereo (and
// 6-channel FLAC) with ffmpeg's encoders and decodes it with this package.
// The channels carry a 440 Hz tone plus a 2.5 kHz tone of alternating sign,
// so only a correct decode followed by a mean of the channels leaves the
// plain 440 Hz tone. ffmpeg's WebM muxer writes known-size clusters and Cues,
// the layout the MediaRecorder conformance file does not cover.
func TestDecodeMultichannelViaFFmpeg(t *testing.T) {
	ff := lookFFmpeg()
	if ff == "" {
		t.Skip("ffmpeg is not installed")
	}
	cases := []struct {
		name  string
		rate  int
		ch    int
		args  []string
		ext   string
		want  Format
		min   float64
		maxDt float64
	}{
		{"flac-stereo", 44100, 2, []string{"-c:a", "flac"}, "flac", FormatFLAC, 0.9999, 0.01},
		{"flac-6ch", 48000, 6, []string{"-c:a", "flac"}, "flac", FormatFLAC, 0.9999, 0.01},
		{"mp3-stereo", 44100, 2, []string{"-c:a", "libmp3lame", "-b:a", "128k"}, "mp3", FormatMP3, 0.995, 0.01},
		{"ogg-opus-stereo", 48000, 2, []string{"-c:a", "libopus", "-b:a", "96k"}, "ogg", FormatOggOpus, 0.995, 0.01},
		{"webm-opus-stereo", 48000, 2, []string{"-c:a", "libopus", "-b:a", "96k"}, "webm", FormatWebMOpus, 0.995, 0.01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 3 * c.rate
			tone, hum := testaudio.Sine(440, c.rate, n, 0.4), testaudio.Sine(2500, c.rate, n, 0.3)
			chans := make([][]float32, c.ch)
			for k := range chans {
				chans[k] = make([]float32, n)
				sign := float32(1 - 2*(k%2))
				for i := range chans[k] {
					chans[k][i] = tone[i] + sign*hum[i]
				}
			}
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in.wav"), filepath.Join(dir, "out."+c.ext)
			if err := os.WriteFile(in, testaudio.WAV(testaudio.Format{Bits: 16, Rate: c.rate, Channels: c.ch}, chans), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"-nostdin", "-loglevel", "error", "-i", in}, c.args...)
			if msg, err := exec.Command(ff, append(args, out)...).CombinedOutput(); err != nil {
				t.Fatalf("ffmpeg: %v: %s", err, msg)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if f := Detect(data); f != c.want {
				t.Fatalf("Detect = %q, want %q", f, c.want)
			}
			pcm, err := Decode(data, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if d := math.Abs(float64(len(pcm))/SampleRate - 3); d > c.maxDt {
				t.Errorf("duration off by %.4f s, want ≤ %.2f s", d, c.maxDt)
			}
			ref := testaudio.Sine(440, SampleRate, 3*SampleRate, 0.4)
			end := min(len(pcm), len(ref)) - 1600
			cor, lag := correlation(ref[1600:end], pcm[1600:end], 8)
			t.Logf("c = %.5f at lag %d, %d samples", cor, lag, len(pcm))
			if cor < c.min || lag != 0 {
				t.Errorf("correlation with the 440 Hz tone = %.5f at lag %d, want ≥ %.4f at 0", cor, lag, c.min)
			}
		})
	}
}

// TestOpusPreSkip rewrites the pre-skip of the shared Ogg/Opus file from its
// 312 samples (at 48 kHz) to 0: the decode must then start 104 samples (at
// 16 kHz) earlier and otherwise be identical, and the original must have
// dropped exactly those samples.
func TestOpusPreSkip(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(shareddata.Whisper(t), "audio-formats", "speech.opus-voip-24k-mono.ogg"))
	if err != nil {
		t.Fatal(err)
	}
	head := 27 + int(data[26])
	if string(data[head:head+8]) != "OpusHead" {
		t.Fatal("the first page does not hold OpusHead")
	}
	if got := binary.LittleEndian.Uint16(data[head+10:]); got != 312 {
		t.Fatalf("pre-skip = %d, want 312", got)
	}
	noSkip := append([]byte(nil), data...)
	binary.LittleEndian.PutUint16(noSkip[head+10:], 0)

	withSkip, err := Decode(data, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Decode(noSkip, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(withSkip)+104 {
		t.Fatalf("without pre-skip %d samples, with %d; want 104 more", len(all), len(withSkip))
	}
	for i, v := range withSkip {
		if all[i+104] != v {
			t.Fatalf("sample %d: %v with pre-skip, %v at %d without", i, v, all[i+104], i+104)
		}
	}
}

// TestDecodeFLACDeclaredLength sets the total length in the STREAMINFO of
// the shared FLAC file to about 36 days: Decode must refuse it from the
// header, before decoding a frame.
func TestDecodeFLACDeclaredLength(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(shareddata.Whisper(t), "audio-formats", "speech.flac-s16-mono-22k05.flac"))
	if err != nil {
		t.Fatal(err)
	}
	huge := append([]byte(nil), data...)
	// STREAMINFO starts at byte 8; its 36-bit sample count ends the 18th byte.
	huge[21] |= 0x0F
	copy(huge[22:26], []byte{0xFF, 0xFF, 0xFF, 0xFF})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Decode(huge, time.Minute)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 256<<10 {
		t.Errorf("refusing it allocated %d bytes, want < 256 KiB", d)
	}
	if _, err := Decode(data, time.Minute); err != nil {
		t.Errorf("the unmodified file: %v", err)
	}
}

// TestDecodeRefusesLayoutsNoSpeechNeeds: more than MaxChannels channels or
// a rate above MaxRate is refused as unsupported (415) from the header,
// before the samples are allocated; the limits themselves are accepted.
func TestDecodeRefusesLayoutsNoSpeechNeeds(t *testing.T) {
	tone := func(ch, n int) [][]float32 {
		out := make([][]float32, ch)
		for c := range out {
			out[c] = testaudio.Sine(440, 48000, n, 0.5)
		}
		return out
	}
	for _, s := range []testaudio.Format{{Bits: 16, Rate: 16000, Channels: MaxChannels}, {Bits: 16, Rate: MaxRate, Channels: 2}} {
		pcm, err := Decode(testaudio.WAV(s, tone(s.Channels, s.Rate/10)), time.Minute)
		if err != nil || len(pcm) != 1600 {
			t.Errorf("%s: %d samples, %v", s, len(pcm), err)
		}
	}
	for _, s := range []testaudio.Format{{Bits: 8, Rate: 16000, Channels: MaxChannels + 1}, {Bits: 16, Rate: MaxRate + 1, Channels: 1}, {Bits: 8, Rate: 768000, Channels: 1}} {
		_, err := Decode(testaudio.WAV(s, tone(s.Channels, 100)), time.Minute)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", s, err)
		}
	}
	// The upload: 65,535 channels of 8-bit samples, 25 MB. Refused
	// with next to no allocation (the file itself is the caller's).
	hdr := testaudio.WAV(testaudio.Format{Bits: 8, Rate: 16000, Channels: 1}, tone(1, 1))
	binary.LittleEndian.PutUint16(hdr[22:], 65535)
	binary.LittleEndian.PutUint16(hdr[32:], 65535)
	big := append(hdr, make([]byte, 25<<20)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decode(big, 2*time.Minute)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("65,535 channels: err = %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", alloc)
	}
	// A mono 8-bit file at the largest rate allocates the mono samples
	// once, not one float per byte per channel.
	stereo := testaudio.WAV(testaudio.Format{Bits: 8, Rate: MaxRate, Channels: MaxChannels}, tone(MaxChannels, MaxRate))
	runtime.ReadMemStats(&before)
	if _, err := Decode(stereo, time.Minute); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// MaxRate mono floats (768 KB) and the 16 kHz result; the old decoder
	// took 8 times the first.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*4*MaxRate {
		t.Errorf("decoding one second of %d channels at %d Hz allocated %d bytes", MaxChannels, MaxRate, alloc)
	}
}
func TestM4AAvailableFollowsPATH(t *testing.T) {
	if lookFFmpeg() == "" {
		t.Skip("ffmpeg is not installed here (scripts/deps.sh installs it)")
	}
	if !M4AAvailable() {
		t.Fatal("ffmpeg is on PATH but M4AAvailable says no")
	}
	t.Setenv("PATH", t.TempDir())
	if M4AAvailable() {
		t.Error("ffmpeg is not on PATH but M4AAvailable says yes")
	}
	if _, err := Decode(m4aHeaderOnly(), time.Minute); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "ffmpeg") {
		t.Errorf("Decode of M4A without ffmpeg: %v", err)
	}
}

// m4aHeaderOnly is the start of an M4A file: enough for Detect.
func m4aHeaderOnly() []byte {
	return append([]byte{0, 0, 0, 24}, []byte("ftypM4A \x00\x00\x02\x00isomM4A ")...)
}
