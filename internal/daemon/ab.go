package daemon

import (
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/abtap"
	"github.com/tapfwd/tapfwd/tap"
)

// checkAB refuses a control path that is not a FIFO (Validate checked
// what the A/B mode needs of the rest of the Config).
func (d *Daemon) checkAB() error {
	ab := d.c.AB
	if ab == nil {
		return nil
	}
	f, err := abtap.OpenControl(ab.Control)
	if err == nil {
		f.Close()
	}
	return fail(PartAB, ab.Control, err)
}

// abEndpoint is the one worker's TAP endpoint of the A/B mode: an
// abtap.Endpoint over the TAP's two queues, closed before the TAP.
func (d *Daemon) abEndpoint(qs []*tap.Queue) ([]forward.Endpoint, error) {
	ab := d.c.AB
	e, err := abtap.New(abtap.Config{Queues: [2]abtap.Queue{qs[0], qs[1]}, Control: ab.Control, Delay: ab.Delay,
		HdrLen: d.dev.Features().VnetHdrLen, Logger: d.log})
	if err != nil {
		return nil, fail(PartAB, ab.Control, err)
	}
	d.ab = e
	d.undo.closing("closing the A/B endpoint", e.Close)
	d.log.Info("A/B mode: one worker writes to TAP queue 0 or 1 as the control FIFO says", "control", ab.Control,
		"q0_napi", ab.NAPI[0], "q1_napi", ab.NAPI[1], "delay", ab.Delay)
	return []forward.Endpoint{e}, nil
}

// ABStatus is the A/B mode in /status: the arm in force and what each
// TAP queue took.
type ABStatus struct {
	// Arm is the queue written to now (0 or 1), Delay whether each frame
	// waits DelaySeconds first.
	Arm          int     `json:"arm"`
	Delay        bool    `json:"delay"`
	DelaySeconds float64 `json:"delay_seconds"`
	// NAPI is IFF_NAPI on queue 0 and queue 1.
	NAPI [2]bool `json:"napi"`
	// Frames and bytes (without the vnet header) written to each queue,
	// those written after a delay, and the control bytes taken and
	// refused.
	Q0Frames      uint64 `json:"q0_frames"`
	Q0Bytes       uint64 `json:"q0_bytes"`
	Q1Frames      uint64 `json:"q1_frames"`
	Q1Bytes       uint64 `json:"q1_bytes"`
	DelayedFrames uint64 `json:"delayed_frames"`
	ControlBytes  uint64 `json:"control_bytes"`
	RefusedBytes  uint64 `json:"refused_bytes"`
}

// abStatus is the A/B mode's status; nil without it.
func (d *Daemon) abStatus() *ABStatus {
	if d.ab == nil {
		return nil
	}
	a, t := d.ab.Arm(), d.ab.Totals()
	return &ABStatus{Arm: a.Queue(), Delay: a.Delayed(), DelaySeconds: d.ab.Delay().Seconds(), NAPI: d.c.AB.NAPI,
		Q0Frames: t.Frames[0], Q0Bytes: t.Bytes[0], Q1Frames: t.Frames[1], Q1Bytes: t.Bytes[1],
		DelayedFrames: t.Delayed, ControlBytes: t.Control, RefusedBytes: t.Refused}
}

// logABTotals logs the A/B mode's totals in one line, as Run ends.
func (d *Daemon) logABTotals() {
	s := d.abStatus()
	if s == nil {
		return
	}
	d.log.Info("ab totals", "q0_frames", s.Q0Frames, "q0_bytes", s.Q0Bytes, "q1_frames", s.Q1Frames, "q1_bytes", s.Q1Bytes,
		"delayed_frames", s.DelayedFrames, "control_bytes", s.ControlBytes, "refused_bytes", s.RefusedBytes)
}
