package api

import (
	"fmt"
	"html"
	"image/color"
	"strings"

	"github.com/boombuler/barcode/qr"
)

// qrQuietZone is the blank margin around a QR code, in modules; the standard
// asks for 4.
const qrQuietZone = 4

// qrSVG renders text as a QR code (error correction level M) in an SVG
// string: a white square and one black path, one unit per module, with a
// 4-module quiet zone. It needs no style attribute or script, so the admin
// page can show it under its strict Content-Security-Policy.
func qrSVG(text, label string) (string, error) {
	code, err := qr.Encode(text, qr.M, qr.Auto)
	if err != nil {
		return "", fmt.Errorf("qr: %w", err)
	}
	n := code.Bounds().Dx()
	dark := func(x, y int) bool {
		return color.GrayModel.Convert(code.At(x, y)).(color.Gray).Y < 128
	}
	var d strings.Builder
	for y := 0; y < n; y++ {
		for x := 0; x < n; {
			if !dark(x, y) {
				x++
				continue
			}
			run := 1
			for x+run < n && dark(x+run, y) {
				run++
			}
			fmt.Fprintf(&d, "M%d %dh%dv1h-%dz", x+qrQuietZone, y+qrQuietZone, run, run)
			x += run
		}
	}
	size := n + 2*qrQuietZone
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" shape-rendering="crispEdges" role="img" aria-label="%s">`+
		`<rect width="%d" height="%d" fill="#ffffff"/><path fill="#000000" d="%s"/></svg>`,
		size, size, size*8, size*8, html.EscapeString(label), size, size, d.String()), nil
}
