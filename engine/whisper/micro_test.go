package whisper

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkMicroGemvF16(b *testing.B) {
	rows, cols := 51864, 384
	w := &weight{typ: typeF16, rows: rows, cols: cols, rowBytes: 2 * cols, raw: make([]byte, rows*cols*2)}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < rows*cols; i++ {
		h := f32ToF16(float32(r.NormFloat64()))
		w.raw[2*i], w.raw[2*i+1] = byte(h), byte(h>>8)
	}
	m := &Model{threads: 1}
	x := make([]float32, cols)
	out := make([]float32, rows)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		m.linear(out, x, 1, w, nil)
	}
	b.ReportMetric((cpuTime()-c0).Seconds()*1000/float64(b.N), "cpu_ms/op")
}
