package trace

import (
	"encoding/json"
	"fmt"
)

// Iperf is what iperf3's JSON report says about a run besides its figure.
type Iperf struct {
	// Intervals are the figures of each reported interval, Gbit/s (the
	// omitted ones left out): whether a run changed pace midway.
	Intervals []float64 `json:"interval_gbps,omitempty"`
	// MaxCwnd is the largest congestion window a sending stream had, in
	// bytes; MeanRTT the mean of the streams' smoothed round-trip times,
	// in microseconds; Retransmits theirs summed (TCP only).
	MaxCwnd     int64   `json:"max_snd_cwnd,omitempty"`
	MeanRTT     float64 `json:"mean_rtt_us,omitempty"`
	Retransmits int64   `json:"retransmits,omitempty"`
}

// ParseIperf reads what Iperf holds from an iperf3 -J report.
func ParseIperf(raw []byte) (*Iperf, error) {
	var r struct {
		Intervals []struct {
			Sum struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Omitted       bool    `json:"omitted"`
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			Streams []struct {
				Sender *struct {
					Retransmits int64   `json:"retransmits"`
					MaxSndCwnd  int64   `json:"max_snd_cwnd"`
					MeanRTT     float64 `json:"mean_rtt"`
				} `json:"sender"`
			} `json:"streams"`
		} `json:"end"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("parsing iperf3 JSON: %w", err)
	}
	out := &Iperf{}
	for _, iv := range r.Intervals {
		if !iv.Sum.Omitted {
			out.Intervals = append(out.Intervals, iv.Sum.BitsPerSecond/1e9)
		}
	}
	var rtt float64
	var n int
	for _, s := range r.End.Streams {
		if s.Sender == nil {
			continue
		}
		out.MaxCwnd = max(out.MaxCwnd, s.Sender.MaxSndCwnd)
		out.Retransmits += s.Sender.Retransmits
		if s.Sender.MeanRTT > 0 {
			rtt += s.Sender.MeanRTT
			n++
		}
	}
	if n > 0 {
		out.MeanRTT = rtt / float64(n)
	}
	return out, nil
}
