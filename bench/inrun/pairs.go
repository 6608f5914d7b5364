package inrun

import (
	"fmt"
	"time"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/lab/iperf"
)

type iperfPin = iperf.Pinning

// Pair names: each compares arm B against arm A (IFF_NAPI off) on one
// TAP. PairOn and PairThreaded are the questions; PairAA and
// PairControl the checks every report carries.
const (
	PairOn       = "napi-on"       // queue 1 with IFF_NAPI against queue 0 without
	PairThreaded = "napi-threaded" // the same, the TAP's NAPI threaded (only queue 1 has a NAPI, so only it gets a kthread)
	PairAA       = "a-a"           // two queues, neither with IFF_NAPI: must show no difference
	PairControl  = "control"       // queue 1 without IFF_NAPI, every frame delayed (Options.Delay per 1,500 bytes): must be detected as slower
)

// Baseline is the name reports give arm A, the comparisons' B side in
// the throughput bench's records ("a" against "b").
const Baseline = "napi-off"

// Control bytes (tapfwd's --ab-control): bit 0 picks the TAP queue,
// bit 1 delays every frame written.
const (
	armQueue0      byte = 0
	armQueue1      byte = 1
	armQueue1Delay byte = 3
)

// pairDef is a pair: the tapfwd instance that runs it and the control
// bytes of its arms.
type pairDef struct {
	name, what string
	instance   string
	arms       [2]byte
	check      bool // A/A or the control: on the first row only, not in the family of verdicts
}

// Instance names: one tapfwd (and bed) per visit of each.
const (
	instNAPI     = "napi"     // --ab-napi off,on
	instThreaded = "threaded" // --ab-napi off,on --tap-napi-threaded
	instPlain    = "plain"    // --ab-napi off,off
)

func pairDefs(delay time.Duration) []pairDef {
	return []pairDef{
		{PairOn, "IFF_NAPI on (queue 1) against off (queue 0)", instNAPI, [2]byte{armQueue0, armQueue1}, false},
		{PairThreaded, "IFF_NAPI on with the TAP's NAPI threaded (queue 1) against off (queue 0)", instThreaded, [2]byte{armQueue0, armQueue1}, false},
		{PairAA, "A/A: queue 1 against queue 0, neither with IFF_NAPI", instPlain, [2]byte{armQueue0, armQueue1}, true},
		{PairControl, fmt.Sprintf("positive control: queue 1 without IFF_NAPI, every frame delayed %s per 1,500 bytes, against queue 0", delay), instPlain, [2]byte{armQueue0, armQueue1Delay}, true},
	}
}

// instanceOptions are the tapfwd settings of instance name: one worker
// (on the first CPU), two TAP queues with IFF_NAPI as the instance says,
// vnet headers on; the threaded instance's kthread pinned to kthreadCPU.
//
// Swapped puts arm B on queue 0 and arm A on queue 1: visits alternate,
// so that whatever favours one queue of a TAP over the other falls on
// both arms alike (an A/A run of queue 1 against queue 0 read +2.4%
// [+0.1, +4.7] over five runs, all of them in the same orientation).
func instanceOptions(name string, delay time.Duration, kthreadCPU int, swapped bool) forwarder.Options {
	o := forwarder.Options{VnetHdr: forwarder.On, ABNAPI: [2]forwarder.Switch{forwarder.Off, forwarder.On}, ABDelay: delay}
	switch name {
	case instThreaded:
		o.TAPNAPIThreaded = true
		if kthreadCPU >= 0 {
			o.TAPNAPICPU = forwarder.CPU(kthreadCPU)
		}
	case instPlain:
		o.ABNAPI[1] = forwarder.Off
	}
	if swapped {
		o.ABNAPI[0], o.ABNAPI[1] = o.ABNAPI[1], o.ABNAPI[0]
	}
	return o
}

// orient is a pair's control bytes in a visit: swapped, each arm on the
// other queue (bit 0 flipped).
func orient(arms [2]byte, swapped bool) [2]byte {
	if swapped {
		arms[0] ^= 1
		arms[1] ^= 1
	}
	return arms
}

// swappedIn says whether the visits of repetition rep are swapped: every
// other one.
func swappedIn(rep int) bool { return rep%2 == 0 }

// SeedRows are the QEMU IFF_NAPI patch's table as rows of this bed: TCP
// writes of 64 B, 128 B and 4 KB, one stream and four, wire->lab (the
// direction where frames are written into the TAP, where IFF_NAPI acts).
// Both iperf3 processes run on the second CPU, away from tapfwd's worker
// on the first, so that no window finds them elsewhere: with the client
// beside the worker, one-stream runs of 64 B writes stalled for whole
// RTOs (no frame for 200-400 ms, 3-4 retransmits a second) and their
// estimates spread 12-14% from run to run, against 1.3% placed apart.
func SeedRows(cpus []int) []throughput.Workload {
	ws := throughput.Workloads([]int{64, 128, 4096}, []int{1, 4}, []string{throughput.WireToLab}, false)
	return place(ws, cpus)
}

// OneRow is the napi preset's row: TCP 64 B, one stream, wire->lab.
func OneRow(cpus []int) []throughput.Workload {
	return place(throughput.Workloads([]int{64}, []int{1}, []string{throughput.WireToLab}, false), cpus)
}

// place pins every workload's iperf3 to the second CPU (see SeedRows);
// with one CPU it leaves them to the scheduler.
func place(ws []throughput.Workload, cpus []int) []throughput.Workload {
	if len(cpus) < 2 {
		return ws
	}
	for i := range ws {
		ws[i].Placement = &throughput.Placement{Name: throughput.Pinned, Iperf: &iperfPin{Wire: cpus[1], Lab: cpus[1]}}
	}
	return ws
}
