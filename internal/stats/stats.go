// Package stats holds the small statistics the reports share.
package stats

import "math"

// Mean is the mean of xs (0 for none).
func Mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// StdDev is the sample standard deviation of xs (n − 1; 0 for fewer than
// two).
func StdDev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := Mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}
