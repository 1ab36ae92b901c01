package f32

import "testing"

func TestDot(t *testing.T) {
	a := []float32{1, 2, 3, 4, 5, 6, 7}
	b := []float32{7, 6, 5, 4, 3, 2, 1, 100}
	if got := Dot(a, b); got != 84 {
		t.Fatalf("Dot = %v, want 84", got)
	}
	if got := Dot(nil, b); got != 0 {
		t.Fatalf("empty Dot = %v", got)
	}
}
