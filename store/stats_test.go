package store

import "testing"

func TestPercentiles(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want Percentiles
	}{
		{nil, Percentiles{}},
		{[]int64{7}, Percentiles{N: 1, P50: 7, P95: 7}},
		{[]int64{4, 1, 3, 2}, Percentiles{N: 4, P50: 2, P95: 4}},
		{[]int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200}, Percentiles{N: 20, P50: 100, P95: 190}},
	} {
		if got := percentiles(c.in); got != c.want {
			t.Errorf("percentiles(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
