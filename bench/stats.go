package main

import (
	"math"
	"slices"
	"time"
)

// latency summarizes a sample of durations, in microseconds.
type latency struct {
	N      int     `json:"n"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	MeanUs float64 `json:"mean_us"`
	MaxUs  float64 `json:"max_us"`
	Errors int     `json:"errors,omitempty"`
	Note   string  `json:"note,omitempty"`
}

func summarize(ds []time.Duration, errors int) *latency {
	l := &latency{N: len(ds), Errors: errors}
	if len(ds) == 0 {
		return l
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	l.P50us = us(quantile(s, 0.50))
	l.P99us = us(quantile(s, 0.99))
	l.MeanUs = us(sum / time.Duration(len(s)))
	l.MaxUs = us(s[len(s)-1])
	return l
}

// quantile of a sorted sample, nearest rank.
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func us(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)*10) / 10 }

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
