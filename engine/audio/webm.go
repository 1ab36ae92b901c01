package audio

import (
	"bytes"
	"time"
)

// EBML/Matroska element IDs (with their length markers) used by decodeWebM.
const (
	ebmlHeader      = 0x1A45DFA3
	ebmlDocType     = 0x4282
	mkvSegment      = 0x18538067
	mkvTracks       = 0x1654AE6B
	mkvTrackEntry   = 0xAE
	mkvTrackNumber  = 0xD7
	mkvCodecID      = 0x86
	mkvCodecPrivate = 0x63A2
	mkvCodecDelay   = 0x56AA
	mkvAudio        = 0xE1
	mkvChannels     = 0x9F
	mkvCluster      = 0x1F43B675
	mkvBlockGroup   = 0xA0
	mkvBlock        = 0xA1
	mkvSimpleBlock  = 0xA3
	mkvDiscardPad   = 0x75A2
)

// webmTrack is what decodeWebM learns of one TrackEntry.
type webmTrack struct {
	number     uint64
	codec      string
	private    []byte
	codecDelay uint64 // nanoseconds
	channels   uint64
}

// readVint reads an EBML variable-length integer at data[off:]. With
// marker, the length marker stays in the value (element IDs); without, it is
// removed (sizes) and unknown reports the reserved all-ones "unknown size".
func readVint(data []byte, off int, marker bool) (v uint64, n int, unknown, ok bool) {
	if off >= len(data) || data[off] == 0 {
		return 0, 0, false, false
	}
	b := data[off]
	n = 1
	for mask := byte(0x80); b&mask == 0; mask >>= 1 {
		n++
	}
	if off+n > len(data) {
		return 0, 0, false, false
	}
	v = uint64(b)
	if !marker {
		v &= uint64(0xFF >> n)
	}
	allOnes := v == uint64(0xFF>>n)
	for _, c := range data[off+1 : off+n] {
		v = v<<8 | uint64(c)
		allOnes = allOnes && c == 0xFF
	}
	return v, n, !marker && allOnes, true
}

// decodeWebM decodes the first Opus track of a WebM (or Matroska) file. It
// walks the element tree flatly, descending into the master elements it
// needs instead of skipping them by size, so that the unknown-size Segment
// and Clusters of browser MediaRecorder streams need no special case; Cues
// and durations are never consulted.
func decodeWebM(data []byte, max time.Duration) ([]float32, error) {
	const f = FormatWebMOpus
	var (
		tracks []webmTrack
		audio  *webmTrack
		stream *opusStream
		lace   [][]byte
		// lastBlock is how many frames per channel the latest Block of the
		// audio track decoded to, for a DiscardPadding that follows it.
		lastBlock int
	)
	for off := 0; off < len(data); {
		id, n, _, ok := readVint(data, off, true)
		if !ok {
			break // trailing garbage or a truncated tail
		}
		size, m, unknown, ok := readVint(data, off+n, false)
		if !ok {
			break
		}
		body := off + n + m
		switch id {
		case ebmlHeader, mkvSegment, mkvTracks, mkvCluster, mkvBlockGroup, mkvAudio:
			off = body
			continue
		case mkvTrackEntry:
			tracks = append(tracks, webmTrack{})
			off = body
			continue
		}
		if unknown {
			return nil, corrupt(f, "an element other than a Segment or Cluster has an unknown size")
		}
		if size > uint64(len(data)-body) {
			break // truncated tail: keep what was decoded
		}
		b := data[body : body+int(size)]
		off = body + int(size)
		var tr *webmTrack
		if len(tracks) > 0 {
			tr = &tracks[len(tracks)-1]
		}
		switch id {
		case ebmlDocType:
			if s := string(bytes.TrimRight(b, "\x00")); s != "webm" && s != "matroska" {
				return nil, unsupported(f, "EBML document type is not WebM or Matroska")
			}
		case mkvTrackNumber, mkvCodecDelay, mkvChannels:
			if tr == nil {
				continue
			}
			v := ebmlUint(b)
			switch id {
			case mkvTrackNumber:
				tr.number = v
			case mkvCodecDelay:
				tr.codecDelay = v
			case mkvChannels:
				tr.channels = v
			}
		case mkvCodecID:
			if tr != nil {
				tr.codec = string(bytes.TrimRight(b, "\x00"))
			}
		case mkvCodecPrivate:
			if tr != nil {
				tr.private = b
			}
		case mkvSimpleBlock, mkvBlock:
			if stream == nil {
				if audio == nil {
					for i := range tracks {
						if tracks[i].codec == "A_OPUS" {
							audio = &tracks[i]
							break
						}
					}
					if audio == nil {
						return nil, unsupported(f, "the file has no Opus audio track (only Opus is supported in WebM)")
					}
				}
				head, err := webmOpusHead(f, audio)
				if err != nil {
					return nil, err
				}
				if stream, err = newOpusStream(f, head, max); err != nil {
					return nil, err
				}
			}
			track, frames, err := parseBlock(f, b, lace[:0])
			if err != nil {
				return nil, err
			}
			lace = frames
			if track != audio.number {
				continue
			}
			before := stream.frames()
			for _, p := range frames {
				if err := stream.packet(p); err != nil {
					return nil, err
				}
			}
			lastBlock = stream.frames() - before
		case mkvDiscardPad:
			// Signed nanoseconds of padding at the end of the Block in
			// the same BlockGroup (the encoder's tail, on the last one).
			if stream != nil && lastBlock > 0 && len(b) <= 8 {
				v := int64(ebmlUint(b)) << (64 - 8*len(b)) >> (64 - 8*len(b))
				if v > 0 && v < int64(time.Second) {
					stream.trimEnd(min(lastBlock, int(v*SampleRate/int64(time.Second))))
				}
			}
			lastBlock = 0
		}
	}
	if stream == nil {
		if audio == nil && len(tracks) == 0 {
			return nil, corrupt(f, "no tracks or audio blocks were found")
		}
		return nil, errEmptyFile(f)
	}
	return stream.finish(-1), nil
}

// webmOpusHead builds the Opus header of a track from its CodecPrivate
// (an OpusHead packet) or, lacking one, from its Channels and CodecDelay.
func webmOpusHead(f Format, t *webmTrack) (opusHead, error) {
	if len(t.private) > 0 {
		return parseOpusHead(f, t.private)
	}
	h := opusHead{channels: int(t.channels), gain: 1}
	if h.channels == 0 {
		h.channels = 1
	}
	if h.channels > 2 {
		return opusHead{}, unsupported(f, "multichannel Opus (%d channels) is not supported; record mono or stereo", t.channels)
	}
	if t.codecDelay < uint64(time.Second) {
		h.preSkip = int(t.codecDelay * 48000 / uint64(time.Second))
	}
	return h, nil
}

// ebmlUint reads a big-endian unsigned integer element of up to 8 bytes.
func ebmlUint(b []byte) uint64 {
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// parseBlock splits a (Simple)Block into its track number and frames,
// handling the three lacing schemes. The frames alias b; they are appended
// to dst.
func parseBlock(f Format, b []byte, dst [][]byte) (track uint64, frames [][]byte, err error) {
	track, n, _, ok := readVint(b, 0, false)
	if !ok || len(b) < n+3 {
		return 0, nil, corrupt(f, "a block header is truncated")
	}
	flags := b[n+2]
	p := b[n+3:]
	lacing := flags >> 1 & 3
	if lacing == 0 {
		return track, append(dst, p), nil
	}
	if len(p) < 1 {
		return 0, nil, corrupt(f, "a laced block is truncated")
	}
	count := int(p[0]) + 1
	p = p[1:]
	sizes := make([]int, count)
	switch lacing {
	case 1: // Xiph: sizes as runs of 255-terminated bytes
		for i := 0; i < count-1; i++ {
			for {
				if len(p) == 0 {
					return 0, nil, corrupt(f, "a laced block is truncated")
				}
				c := p[0]
				p = p[1:]
				sizes[i] += int(c)
				if sizes[i] > maxPacket {
					return 0, nil, corrupt(f, "a laced frame is implausibly large")
				}
				if c != 255 {
					break
				}
			}
		}
	case 2: // fixed
		if len(p)%count != 0 {
			return 0, nil, corrupt(f, "a fixed-size laced block does not divide evenly")
		}
		for i := range sizes {
			sizes[i] = len(p) / count
		}
	case 3: // EBML: first size, then signed differences
		v, k, _, ok := readVint(p, 0, false)
		if !ok || v > maxPacket {
			return 0, nil, corrupt(f, "a laced block is truncated")
		}
		sizes[0] = int(v)
		p = p[k:]
		for i := 1; i < count-1; i++ {
			u, k, _, ok := readVint(p, 0, false)
			if !ok {
				return 0, nil, corrupt(f, "a laced block is truncated")
			}
			bias := int64(1)<<(7*k-1) - 1
			sizes[i] = sizes[i-1] + int(int64(u)-bias)
			if sizes[i] < 0 || sizes[i] > maxPacket {
				return 0, nil, corrupt(f, "a laced block has an invalid frame size")
			}
			p = p[k:]
		}
	}
	if lacing != 2 {
		used := 0
		for _, s := range sizes[:count-1] {
			used += s
		}
		if used > len(p) {
			return 0, nil, corrupt(f, "a laced block is truncated")
		}
		sizes[count-1] = len(p) - used
	}
	for _, s := range sizes {
		dst = append(dst, p[:s])
		p = p[s:]
	}
	return track, dst, nil
}
