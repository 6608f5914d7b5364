package forwarder

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/napi"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		args  string
		needs uint32
	}{
		{Options{}, "", 0},
		{Options{NAPI: Off, VnetHdr: On}, "--napi off --vnet-hdr on", unix.IFF_VNET_HDR},
		{Options{Queues: 2, NAPI: Auto, VnetHdr: Auto}, "--queues 2 --napi auto --vnet-hdr auto", unix.IFF_MULTI_QUEUE},
		{Options{NAPI: On, VnetHdr: On, TAPGROFlushTimeout: 20 * time.Microsecond, TAPNAPIDeferHardIRQs: 1},
			"--napi on --vnet-hdr on --tap-gro-flush-timeout 20us --tap-napi-defer-hard-irqs 1", unix.IFF_NAPI | unix.IFF_VNET_HDR},
		{Options{NAPI: On, Poll: Block, TAPNAPIThreaded: true}, "--napi on --poll block --tap-napi-threaded", unix.IFF_NAPI},
		{Options{NAPI: On, TAPNAPIThreaded: true, TAPNAPICPU: CPU(1)}, "--napi on --tap-napi-threaded --tap-napi-cpu 1", unix.IFF_NAPI},
		{Options{NAPI: Auto, Poll: Block, NICNAPIThreaded: napi.ThreadedBusyPoll, NICNAPICPU: CPU(0)},
			"--napi auto --poll block --nic-napi-threaded busy-poll --nic-napi-cpu 0", 0},
		{Options{TAPGROFlushTimeout: 1500 * time.Nanosecond, NoGRO: true}, "--tap-gro-flush-timeout 1.5µs --gro=false", 0},
	} {
		if got := strings.Join(tc.o.Args(), " "); got != tc.args {
			t.Errorf("%+v: Args %q, want %q", tc.o, got, tc.args)
		}
		if got := tc.o.Needs(); got != tc.needs {
			t.Errorf("%+v: Needs %#x, want %#x", tc.o, got, tc.needs)
		}
	}
}
