package profile

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// nsClient is an HTTP client whose connections are made in namespace ns
// of bed (an http.Client dials from goroutines of its own, which are in
// the bench's namespace; Bed.Do dials on a thread inside ns).
func nsClient(bed *testbed.Bed, ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := bed.Do(ns, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// get fetches url with c, within timeout.
func get(ctx context.Context, c *http.Client, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, err
}

// counters are the series of tapfwd's metrics a profile reads, summed
// over queues: by metric name and device.
type counters map[string]map[string]float64

// batch is the histogram of tapfwd_batch_frames of one device, summed
// over queues: the count per upper bound (not cumulative).
type batch struct {
	count, sum float64
	buckets    map[float64]float64
}

// metrics is one scrape.
type metrics struct {
	c     counters
	batch map[string]*batch
}

// Metric names a profile reads.
const (
	mPackets  = "tapfwd_packets_total"
	mGSO      = "tapfwd_gso_frames_total"
	mMerged   = "tapfwd_gro_merged_frames_total"
	mSegments = "tapfwd_segments_total"
	mBatch    = "tapfwd_batch_frames"
)

// parseMetrics reads a /metrics page.
func parseMetrics(text string) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return metrics{}, fmt.Errorf("reading tapfwd's metrics: %w", err)
	}
	m := metrics{c: counters{}, batch: map[string]*batch{}}
	for _, name := range []string{mPackets, mGSO, mMerged, mSegments} {
		for _, s := range fams[name].GetMetric() {
			key := label(s, "device")
			if d := label(s, "direction"); d != "" {
				key += "/" + d
			}
			if m.c[name] == nil {
				m.c[name] = map[string]float64{}
			}
			m.c[name][key] += s.GetCounter().GetValue()
		}
	}
	for _, s := range fams[mBatch].GetMetric() {
		dev, h := label(s, "device"), s.GetHistogram()
		b := m.batch[dev]
		if b == nil {
			b = &batch{buckets: map[float64]float64{}}
			m.batch[dev] = b
		}
		b.count += float64(h.GetSampleCount())
		b.sum += h.GetSampleSum()
		prev := 0.0
		for _, bk := range h.GetBucket() {
			c := float64(bk.GetCumulativeCount())
			b.buckets[bk.GetUpperBound()] += c - prev
			prev = c
		}
	}
	return m, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Batches are what tapfwd's counters say about one direction over a
// window: how many frames each wake-up of the worker found, and how many
// writes it took to hand them on.
type Batches struct {
	// Direction is "wire->lab" (NIC to TAP) or "lab->wire".
	Direction string `json:"direction"`
	// Frames read from the device, in Wakeups batches: FramesPerWakeup on
	// average, Histogram by batch size (upper bound: batches).
	Frames          float64  `json:"frames"`
	Wakeups         float64  `json:"wakeups"`
	FramesPerWakeup float64  `json:"frames_per_wakeup"`
	Histogram       []Bucket `json:"histogram,omitempty"`
	// GSO super-frames among Frames.
	GSO float64 `json:"gso_frames"`
	// Written are the frames handed to the other device, one write each:
	// WritesPerFrame of them per frame read.
	Written        float64 `json:"written"`
	WritesPerFrame float64 `json:"writes_per_frame"`
	// Merged are the frames userspace GRO folded into another
	// (wire->lab), MergedPerWakeup of them per wake-up; Segments the
	// frames userspace segmentation made.
	Merged          float64 `json:"gro_merged,omitempty"`
	MergedPerWakeup float64 `json:"gro_merged_per_wakeup,omitempty"`
	Segments        float64 `json:"segments,omitempty"`
}

// Bucket is one bucket of the batch-size histogram: the wake-ups that
// found at most UpTo frames and more than the bucket before's.
type Bucket struct {
	UpTo    string  `json:"up_to"`
	Wakeups float64 `json:"wakeups"`
}

// batches are both directions between scrapes a and b of a tapfwd on
// nic and tap.
func batches(a, b metrics, nic, tap string) []Batches {
	sub := func(name, key string) float64 { return b.c[name][key] - a.c[name][key] }
	var out []Batches
	for _, d := range []struct{ dir, from, to string }{{"wire->lab", nic, tap}, {"lab->wire", tap, nic}} {
		x := Batches{Direction: d.dir, Frames: sub(mPackets, d.from+"/rx"), Written: sub(mPackets, d.to+"/tx"), GSO: sub(mGSO, d.from)}
		if hb, ha := b.batch[d.from], a.batch[d.from]; hb != nil {
			if ha == nil {
				ha = &batch{}
			}
			x.Wakeups = hb.count - ha.count
			for _, le := range slices.Sorted(maps.Keys(hb.buckets)) {
				if n := hb.buckets[le] - ha.buckets[le]; n > 0 {
					x.Histogram = append(x.Histogram, Bucket{UpTo: model.SampleValue(le).String(), Wakeups: n})
				}
			}
		}
		if d.from == nic {
			x.Merged, x.Segments = sub(mMerged, nic), sub(mSegments, tap)
		}
		if x.Wakeups > 0 {
			x.FramesPerWakeup, x.MergedPerWakeup = x.Frames/x.Wakeups, x.Merged/x.Wakeups
		}
		if x.Frames > 0 {
			x.WritesPerFrame = x.Written / x.Frames
		}
		out = append(out, x)
	}
	return out
}
