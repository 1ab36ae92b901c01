package audio

import (
	"bytes"
	"encoding/binary"
	"time"
)

// maxPacket bounds one reassembled Ogg packet or WebM block: a real Opus
// packet is at most 120 ms of 1275-byte frames, about 61 KiB.
const maxPacket = 1 << 20

// oggPage is one parsed Ogg page.
type oggPage struct {
	continued bool
	granule   int64
	serial    uint32
	segments  []byte // lacing values
	body      []byte
}

// nextOggPage parses the page at data[off:] and returns it with the offset of
// the next page. ok is false when no complete page remains (end of data or a
// truncated tail). Bytes that are not a page are skipped up to the next
// capture pattern, as Ogg readers resynchronise. CRCs are not checked: a
// damaged page decodes to a glitch rather than failing the whole upload.
func nextOggPage(data []byte, off int) (page oggPage, next int, ok bool) {
	for {
		if off+27 > len(data) {
			return oggPage{}, len(data), false
		}
		if string(data[off:off+4]) == "OggS" && data[off+4] == 0 {
			break
		}
		i := bytes.Index(data[off+1:], []byte("OggS"))
		if i < 0 {
			return oggPage{}, len(data), false
		}
		off += 1 + i
	}
	h := data[off:]
	nseg := int(h[26])
	if 27+nseg > len(h) {
		return oggPage{}, len(data), false
	}
	seg := h[27 : 27+nseg]
	bodyLen := 0
	for _, v := range seg {
		bodyLen += int(v)
	}
	if 27+nseg+bodyLen > len(h) {
		return oggPage{}, len(data), false
	}
	page = oggPage{
		continued: h[5]&1 != 0,
		granule:   int64(binary.LittleEndian.Uint64(h[6:14])),
		serial:    binary.LittleEndian.Uint32(h[14:18]),
		segments:  seg,
		body:      h[27+nseg : 27+nseg+bodyLen],
	}
	return page, off + 27 + nseg + bodyLen, true
}

// oggIsOpus reports whether the first Ogg page starts an Opus stream.
func oggIsOpus(data []byte) bool {
	p, _, ok := nextOggPage(data, 0)
	return ok && bytes.HasPrefix(p.body, []byte("OpusHead"))
}

// decodeOggOpus decodes the first logical stream of an Ogg file, which must
// be Opus (RFC 7845). Other multiplexed streams are ignored.
func decodeOggOpus(data []byte, max time.Duration) ([]float32, error) {
	const f = FormatOggOpus
	var (
		serial      uint32
		started     bool
		cur         []byte
		npackets    int
		stream      *opusStream
		lastGranule int64 = -1
	)
	for off := 0; ; {
		page, next, ok := nextOggPage(data, off)
		if !ok {
			break
		}
		off = next
		if !started {
			serial, started = page.serial, true
		}
		if page.serial != serial {
			continue
		}
		if !page.continued {
			cur = cur[:0] // a packet left open by a lost page is dropped
		}
		pos := 0
		for _, l := range page.segments {
			cur = append(cur, page.body[pos:pos+int(l)]...)
			pos += int(l)
			if len(cur) > maxPacket {
				return nil, corrupt(f, "an Ogg packet is implausibly large")
			}
			if l == 255 {
				continue // the packet goes on in the next segment or page
			}
			switch npackets {
			case 0:
				head, err := parseOpusHead(f, cur)
				if err != nil {
					return nil, err
				}
				if stream, err = newOpusStream(f, head, max); err != nil {
					return nil, err
				}
			case 1:
				// OpusTags: comments only.
			default:
				if err := stream.packet(cur); err != nil {
					return nil, err
				}
			}
			npackets++
			cur = cur[:0]
		}
		if page.granule >= 0 && npackets > 2 {
			lastGranule = page.granule
		}
	}
	if stream == nil {
		return nil, corrupt(f, "the Ogg stream has no Opus header")
	}
	total := int64(-1)
	if lastGranule >= int64(stream.head.preSkip) {
		total = lastGranule - int64(stream.head.preSkip)
	}
	return stream.finish(total), nil
}
