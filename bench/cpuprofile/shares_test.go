package cpuprofile

import (
	"math"
	"testing"
)

func TestGoShare(t *testing.T) {
	sys := []string{"internal/runtime/syscall/linux.Syscall6", "syscall.Syscall", "golang.org/x/sys/unix.write", "golang.org/x/sys/unix.Write"}
	with := func(stack []string, callers ...string) []string {
		return append(append([]string(nil), stack...), callers...)
	}
	for _, tc := range []struct {
		stack []string
		want  string
	}{
		{with(sys, module+"tap.(*Queue).Write", module+"forward.(*QueueWorker).flushTAP"), TAPWrite},
		{with(sys, module+"tap.(*URingQueue).Write"), TAPWrite},
		{with(sys, module+"tap.(*URingQueue).readBatch", module+"tap.(*URingQueue).Read"), TAPRead},
		{with(sys, module+"tap.(*Queue).Read"), TAPRead},
		{with(sys, module+"afpacket.(*Socket).Read"), NICRecv},
		{with(sys, module+"afpacket.(*Socket).Write", module+"forward.sendNIC"), NICSend},
		{with(sys, module+"afxdp.(*Socket).Write"), NICSend},
		{with(sys, "golang.org/x/sys/unix.Ppoll", module+"forward.(*live).poll"), Wait},
		{with(sys, module+"internal/base/uring.mapRing.func2", module+"internal/base/uring.(*ring).submit", module+"internal/base/uring.(*Poller).Wait", module+"forward.(*worker).wait"), BusyPoll},
		{with(sys, module+"internal/base/uring.(*Poller).Spin", module+"internal/daemon.(*cpuPoller).run"), BusyPoll},
		{with(sys, module+"internal/base/uring.mapRing.func2", module+"internal/base/uring.(*ring).submit", module+"tap.(*URingQueue).Write"), TAPWrite},
		{[]string{"runtime.exitsyscall", "syscall.Syscall", "golang.org/x/sys/unix.write", module + "tap.(*Queue).Write"}, TAPWrite},
		{with(sys, "os.(*File).Write", "log/slog.(*TextHandler).Handle"), OtherSyscall},
		{[]string{"runtime.memmove", module + "forward.(*QueueWorker).acceptFromNIC"}, Copies},
		{[]string{module + "vnethdr.parseIPv4", module + "offload.(*GRO).Coalesce"}, Frames},
		{[]string{module + "offload.mergeable", module + "offload.(*GRO).Coalesce"}, Frames},
		{[]string{module + "forward.(*segBuffers).segment"}, Frames},
		{[]string{module + "forward.(*QueueWorker).acceptFromNIC"}, Worker},
		{[]string{module + "afpacket.parseAux"}, Worker},
		{[]string{"runtime.mallocgc"}, Runtime},
		{[]string{"internal/runtime/maps.(*Map).getWithKey"}, Runtime},
		{[]string{"github.com/prometheus/client_golang/prometheus.(*Registry).Gather"}, Other},
		{nil, Other},
	} {
		if got := goShare(tc.stack); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.stack, got, tc.want)
		}
	}
	p := &CPUProfile{Samples: []Sample{
		{Stack: with(sys, module+"tap.(*Queue).Write"), Nanos: 30},
		{Stack: with(sys, module+"afpacket.(*Socket).Read"), Nanos: 10},
		{Stack: with(sys, "os.(*File).Write"), Nanos: 5},
		{Stack: []string{"runtime.mallocgc"}, Nanos: 55},
	}}
	sites := SyscallSites(p, 10)
	if len(sites) != 3 || sites[0].Name != module+"tap.(*Queue).Write" || math.Abs(sites[0].FlatPct-30) > 1e-9 || sites[2].Name != "(outside tapfwd's packages)" {
		t.Errorf("SyscallSites: %+v", sites)
	}
	if s := GoShares(p); s[0].Name != TAPWrite || math.Abs(s[0].Percent-30) > 1e-9 || math.Abs(s[0].Seconds-30e-9) > 1e-18 {
		t.Errorf("GoShares: %+v", s)
	}
}
