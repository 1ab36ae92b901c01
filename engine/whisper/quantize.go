package whisper

import (
	"encoding/binary"
	"math"
)

// quantizeRow appends the blocks of typ (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0)
// for x, whose length is a multiple of 32, to dst. It rounds the way ggml's
// reference quantisers do (round to nearest), so that a row quantised here
// matches whisper.cpp's quantize tool byte for byte.
func quantizeRow(dst []byte, typ ggmlType, x []float32) []byte {
	for b := 0; b+32 <= len(x); b += 32 {
		v := x[b : b+32]
		switch typ {
		case typeQ8_0:
			var amax float32
			for _, f := range v {
				amax = max(amax, float32(math.Abs(float64(f))))
			}
			d := amax / 127
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			dst = binary.LittleEndian.AppendUint16(dst, f32ToF16(d))
			for _, f := range v {
				dst = append(dst, byte(int8(roundf(f*id))))
			}
		case typeQ4_0, typeQ5_0:
			var amax, mx float32
			for _, f := range v {
				if a := float32(math.Abs(float64(f))); a > amax {
					amax, mx = a, f
				}
			}
			levels, top := float32(-8), 15
			if typ == typeQ5_0 {
				levels, top = -16, 31
			}
			d := mx / levels
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			var q [32]uint8
			for j, f := range v {
				q[j] = uint8(min(top, int(int8(f*id-levels+0.5))))
			}
			dst = binary.LittleEndian.AppendUint16(dst, f32ToF16(d))
			dst = appendNibbles(dst, typ == typeQ5_0, q)
		case typeQ4_1, typeQ5_1:
			lo, hi := v[0], v[0]
			for _, f := range v {
				lo, hi = min(lo, f), max(hi, f)
			}
			steps, top := float32(15), 15
			if typ == typeQ5_1 {
				steps, top = 31, 31
			}
			d := (hi - lo) / steps
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			var q [32]uint8
			for j, f := range v {
				q[j] = uint8(min(top, int(int8((f-lo)*id+0.5))))
			}
			dst = binary.LittleEndian.AppendUint16(dst, f32ToF16(d))
			dst = binary.LittleEndian.AppendUint16(dst, f32ToF16(lo))
			dst = appendNibbles(dst, typ == typeQ5_1, q)
		}
	}
	return dst
}

// appendNibbles appends the 4-bit layout of 32 quantised values (value j
// in the low nibble of byte j, value j+16 in its high nibble), preceded by
// the 32 fifth bits as a little-endian uint32 when fifth is true.
func appendNibbles(dst []byte, fifth bool, q [32]uint8) []byte {
	if fifth {
		var qh uint32
		for j := 0; j < 32; j++ {
			qh |= uint32(q[j]>>4&1) << j
		}
		dst = binary.LittleEndian.AppendUint32(dst, qh)
	}
	for j := 0; j < 16; j++ {
		dst = append(dst, q[j]&15|(q[j+16]&15)<<4)
	}
	return dst
}

// roundf rounds half away from zero, like C's roundf.
func roundf(f float32) float32 {
	return float32(math.Round(float64(f)))
}
