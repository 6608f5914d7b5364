package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/cpulist"
	"github.com/tapfwd/tapfwd/metrics"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/ring"
	"github.com/tapfwd/tapfwd/tap"
)

func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlagSet("run", "run --nic IFACE [flags]", stderr)
	nic := fs.String("nic", "", "NIC (or veth) to forward to; required")
	tapName := fs.String("tap", "", `TAP interface name; empty lets the kernel pick "tapN"`)
	queues := fs.Int("queues", 1, "number of TAP queues and packet sockets, one worker each")
	cpus := fs.String("cpus", "", `CPUs for the workers, e.g. "0,1" or "2-3" (queue i takes the i-th, wrapping); "none" disables pinning; empty pins queue i to the i-th allowed CPU`)
	napiWant := fs.String("napi", "auto", "IFF_NAPI on the TAP: auto (when the kernel has it), on (fail without it), off")
	vnet := fs.String("vnet-hdr", "auto", "IFF_VNET_HDR (virtio-net headers, offloads) on the TAP: auto, on, off")
	tapNetns := fs.String("tap-netns", "", "move the TAP into this network namespace (a name under /run/netns); empty keeps it here")
	tapAddr := fs.String("tap-addr", "", `address for the TAP in CIDR form, e.g. "198.18.1.2/24"; empty assigns none`)
	tapMTU := fs.Int("tap-mtu", 0, "TAP MTU in bytes; 0 takes the NIC's MTU")
	tapMAC := fs.String("tap-mac", "", "TAP Ethernet address, e.g. 02:00:00:00:00:01; empty lets the kernel pick a random one")
	tapThreaded := fs.Bool("tap-napi-threaded", false, "run the TAP's NAPI poll in a kthread (sysfs threaded=1), so written frames can pile up and merge in GRO; needs IFF_NAPI")
	tapGROFlush := fs.Duration("tap-gro-flush-timeout", 0, "the TAP's gro_flush_timeout (e.g. 20us): how long GRO may hold frames; 0 leaves the kernel default; needs IFF_NAPI")
	tapDefer := fs.Int("tap-napi-defer-hard-irqs", 0, "the TAP's napi_defer_hard_irqs: polls to repeat before re-arming; 0 leaves the kernel default; needs IFF_NAPI")
	tapNapiCPU := fs.Int("tap-napi-cpu", -1, "pin the TAP's NAPI kthreads (napi/TAP-0, with --tap-napi-threaded) to this CPU; -1 leaves them")
	nicNapiThreaded := fs.String("nic-napi-threaded", "", "set the NIC's NAPI instances threaded over netlink: enabled (a kthread polls on demand) or busy-poll (Linux 6.19+, polls continuously); empty leaves them; restored on exit. A veth has NAPI instances only with GRO on")
	nicNapiCPU := fs.Int("nic-napi-cpu", -1, "pin the NIC's NAPI kthreads (with --nic-napi-threaded) to this CPU; -1 leaves them")
	poll := fs.String("poll", "block", "how workers wait: block (sleep in ppoll until a fd is ready) or busy (spin on non-blocking reads: lowest latency, one full CPU per queue)")
	gro := fs.Bool("gro", true, "userspace GRO: merge consecutive TCP segments of a flow from the NIC into one GSO frame per TAP write, and same-size UDP datagrams into one USO frame when the TAP takes USO (needs the TAP's vnet header)")
	batch := fs.Int("batch", 64, "most frames moved per direction per wake-up (1-1024)")
	promisc := fs.Bool("promisc", false, "put the NIC in promiscuous mode instead of asking for the TAP's MAC and all multicast")
	strictMAC := fs.Bool("strict-mac", false, "drop frames from the TAP whose source MAC is not the TAP's, and accept from the NIC only frames to the TAP's MAC, broadcast and multicast (a BPF filter): lets several instances share one NIC; VM ports with their own MACs need it off")
	waitNIC := fs.Bool("wait-nic", false, "when the NIC is removed, wait for it to come back and resume instead of exiting (needs CAP_NET_RAW throughout: not with --user)")
	userName := fs.String("user", "", "after opening every fd, drop to this user: supplementary groups cleared, its uid and primary gid, no capabilities")
	vmPorts := fs.Int("vm-ports", 0, "VM ports (macvtap, bridge mode) to create on the TAP at start and remove at exit; 0 creates none (see tapfwd vm-port)")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9310", `serve Prometheus metrics at http://HOST:PORT/metrics; empty disables`)
	pprofOn := fs.Bool("pprof", false, "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for profiling the data path)")
	statsInterval := fs.Duration("stats-interval", 0, "log a one-line throughput summary per queue this often (e.g. 10s); 0 disables")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	if *nic == "" {
		fmt.Fprintln(stderr, "tapfwd run: --nic is required")
		fs.Usage()
		return errUsage
	}
	if *queues < 1 || *queues > 256 {
		return fmt.Errorf("--queues %d: want 1 to 256", *queues)
	}
	if *batch < 1 || *batch > 1024 {
		return fmt.Errorf("--batch %d: want 1 to 1024", *batch)
	}
	tc := tap.Config{Name: *tapName, Queues: *queues, MTU: *tapMTU, Netns: *tapNetns}
	if tc.NAPI, err = tap.ParseWant(*napiWant); err != nil {
		return fmt.Errorf("--napi: %w", err)
	}
	if tc.VnetHdr, err = tap.ParseWant(*vnet); err != nil {
		return fmt.Errorf("--vnet-hdr: %w", err)
	}
	if *tapAddr != "" {
		if tc.Addr, err = netip.ParsePrefix(*tapAddr); err != nil {
			return fmt.Errorf("--tap-addr: %w", err)
		}
	}
	if tc.MAC, err = tap.HardwareAddr(*tapMAC); err != nil {
		return fmt.Errorf("--tap-mac: %w", err)
	}
	tc.Sysfs = map[string]string{}
	if *tapThreaded {
		tc.Sysfs["threaded"] = "1"
	}
	if *tapGROFlush < 0 || *tapDefer < 0 {
		return errors.New("--tap-gro-flush-timeout and --tap-napi-defer-hard-irqs must not be negative")
	}
	if *tapGROFlush > 0 {
		tc.Sysfs["gro_flush_timeout"] = strconv.FormatInt(tapGROFlush.Nanoseconds(), 10)
	}
	if *tapDefer > 0 {
		tc.Sysfs["napi_defer_hard_irqs"] = strconv.Itoa(*tapDefer)
	}
	if len(tc.Sysfs) > 0 && tc.NAPI == tap.Off {
		return errors.New("--tap-napi-threaded, --tap-gro-flush-timeout and --tap-napi-defer-hard-irqs act on the TAP's NAPI: they need --napi auto or on")
	}
	if *poll != "block" && *poll != "busy" {
		return fmt.Errorf("--poll: want block or busy, got %q", *poll)
	}
	var nicThreaded napi.Threaded
	if *nicNapiThreaded != "" {
		if nicThreaded, err = napi.ParseThreaded(*nicNapiThreaded); err != nil || nicThreaded == napi.ThreadedDisabled {
			return fmt.Errorf("--nic-napi-threaded: want enabled or busy-poll, got %q", *nicNapiThreaded)
		}
		if *userName != "" {
			return errors.New("--nic-napi-threaded is restored at exit, which needs CAP_NET_ADMIN: it cannot be combined with --user")
		}
	} else if *nicNapiCPU >= 0 {
		return errors.New("--nic-napi-cpu needs --nic-napi-threaded")
	}
	if *tapNapiCPU >= 0 && !*tapThreaded {
		return errors.New("--tap-napi-cpu needs --tap-napi-threaded")
	}
	if *vmPorts < 0 || *vmPorts > 64 {
		return fmt.Errorf("--vm-ports %d: want 0 to 64", *vmPorts)
	}
	if *vmPorts > 0 && *strictMAC {
		return errors.New("--strict-mac drops the VM ports' frames (their MACs are not the TAP's): use one or the other")
	}
	if *userName != "" && *waitNIC {
		return errors.New("--wait-nic reopens packet sockets, which needs CAP_NET_RAW: it cannot be combined with --user")
	}
	var cred *credential
	if *userName != "" {
		if cred, err = lookupUser(*userName); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
	}
	cpuList, err := workerCPUs(*cpus, *queues)
	if err != nil {
		return fmt.Errorf("--cpus: %w", err)
	}
	ifi, err := net.InterfaceByName(*nic)
	if err != nil {
		return fmt.Errorf("NIC %q not found in this network namespace: %w", *nic, err)
	}
	if tc.MTU == 0 {
		tc.MTU = ifi.MTU
	}

	dev, err := tap.Open(tc)
	if err != nil {
		return err
	}
	defer dev.Close()
	f := dev.Features()
	macs := []net.HardwareAddr{dev.MAC()}
	if *vmPorts > 0 {
		ports, err := tap.AddVMPorts(dev, *vmPorts)
		if err != nil {
			return err
		}
		// Before dev.Close: the ports go with the TAP, their /dev nodes not.
		defer tap.RemoveVMPorts(ports)
		for _, p := range ports {
			log.Info("vm-port", "name", p.Name, "dev", p.Dev, "mac", p.MAC.String(), "qemu", qemuLine(p))
			// A real NIC filters unicast by MAC: ask for the guests' too.
			macs = append(macs, p.MAC)
		}
	}
	rc := ring.Config{
		Ifname:  *nic,
		Queues:  *queues,
		Batch:   *batch,
		MACs:    macs,
		Promisc: *promisc,
	}
	fc := forward.Config{Batch: *batch, CPUs: cpuList, TAPVnetHdr: f.VnetHdr, MTU: tc.MTU, Logger: log, Busy: *poll == "busy", GRO: *gro,
		UDPGRO: f.Offloads&(unix.TUN_F_USO4|unix.TUN_F_USO6) == unix.TUN_F_USO4|unix.TUN_F_USO6}
	if *strictMAC {
		rc.FilterMAC = dev.MAC()
		fc.StrictMAC = dev.MAC()
	}
	socks, err := ring.Open(rc)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	if *tapNapiCPU >= 0 {
		pids, err := pinTAPKthreads(dev.Name(), *tapNapiCPU)
		if err != nil {
			return err
		}
		log.Info("pinned the TAP's NAPI kthreads", "pids", fmt.Sprint(pids), "cpu", *tapNapiCPU)
	}
	if nicThreaded != napi.ThreadedDisabled {
		restore, err := setNICNAPI(log, ifi.Index, *nic, nicThreaded, *nicNapiCPU)
		if err != nil {
			return err
		}
		defer restore()
	}
	fw, err := forward.New(dev.Fds(), socks, fc)
	if err != nil {
		return err
	}
	defer fw.Close()
	var httpSrv *http.Server
	if *metricsAddr != "" {
		// Opened now: reading the TAP's namespace later needs no privilege.
		tapLinks, err := tap.NewLinkReader(dev.Netns())
		if err != nil {
			return err
		}
		defer tapLinks.Close()
		nicLinks, err := tap.NewLinkReader("")
		if err != nil {
			return err
		}
		defer nicLinks.Close()
		src := metrics.Source{TAP: dev.Name(), NIC: *nic, Features: f, Queues: fw.Queues(),
			LinkStats: func(name string) (tap.LinkStats, error) {
				if name == *nic {
					return nicLinks.Read(name)
				}
				return tapLinks.Read(name) // the TAP and its VM ports
			},
			VMPorts: func() ([]string, error) { return tapLinks.VMPortNames(dev.Name()) }}
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w (choose another address, or \"\" to disable metrics)", err)
		}
		handler := metrics.Handler(metrics.NewRegistry(metrics.NewCollector(src)))
		if *pprofOn {
			mux := http.NewServeMux()
			mux.Handle("/", handler)
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
			handler = mux
		}
		httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		go httpSrv.Serve(ln)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			httpSrv.Shutdown(sctx)
		}()
		log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	if cred != nil {
		// Every fd is open: nothing from here on needs privilege.
		if err := cred.drop(); err != nil {
			return fmt.Errorf("--user %s: %w", *userName, err)
		}
		log.Info("dropped privileges", "user", *userName, "uid", cred.uid, "gid", cred.gid)
	}
	log.Info("forwarding", "tap", dev.Name(), "tap_netns", dev.Netns(), "nic", *nic,
		"queues", *queues, "cpus", fmt.Sprint(cpuList), "napi", f.NAPI, "vnet_hdr", f.VnetHdr,
		"offloads", f.OffloadNames(), "mtu", tc.MTU, "mac", dev.MAC().String())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		s := <-sigc
		log.Info("stopping", "signal", s.String())
		cancel()
		s = <-sigc
		log.Error("second signal: exiting now", "signal", s.String())
		os.Exit(1)
	}()
	if *statsInterval > 0 {
		go logStats(ctx, log, fw, *statsInterval)
	}
	for {
		err = fw.Run(ctx)
		if !*waitNIC || !errors.Is(err, forward.ErrNICGone) || ctx.Err() != nil {
			break
		}
		log.Warn("NIC went away: waiting for it to come back (--wait-nic)", "nic", *nic)
		for _, s := range socks {
			s.Close()
		}
		if socks, err = reopen(ctx, rc); err != nil {
			break
		}
		if err = fw.Reattach(socks); err != nil {
			break
		}
		log.Info("NIC is back: forwarding again", "nic", *nic)
	}
	logTotals(log, fw)
	if ctx.Err() != nil && errors.Is(err, forward.ErrNICGone) {
		err = nil // stopped by a signal while waiting
	}
	if err != nil {
		if errors.Is(err, forward.ErrTAPGone) || errors.Is(err, forward.ErrNICGone) {
			return fmt.Errorf("stopped: %w", err)
		}
		return err
	}
	return nil
}

// setNICNAPI makes every NAPI instance of the NIC threaded and pins its
// kthread; the returned function puts everything back.
func setNICNAPI(log *slog.Logger, ifindex int, nic string, mode napi.Threaded, cpu int) (func(), error) {
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	list, err := c.List(ifindex)
	if err != nil {
		c.Close()
		return nil, err
	}
	if len(list) == 0 {
		c.Close()
		return nil, fmt.Errorf("--nic-napi-threaded: %s has no NAPI instances (a veth has them only with GRO on: ethtool -K %s gro on)", nic, nic)
	}
	ch := napi.NewChanges(c)
	restore := func() {
		if err := ch.Restore(); err != nil {
			log.Error("restoring the NIC's NAPI settings", "err", err)
		}
		c.Close()
	}
	for _, n := range list {
		m := mode
		if err := ch.Set(n.ID, napi.Attrs{Threaded: &m}); err != nil {
			restore()
			return nil, err
		}
		got, err := c.Get(n.ID)
		if err != nil {
			restore()
			return nil, err
		}
		if cpu >= 0 && got.PID > 0 {
			if err := ch.PinKthread(got.PID, cpu); err != nil {
				restore()
				return nil, err
			}
		}
		log.Info("NIC NAPI threaded", "nic", nic, "napi_id", n.ID, "mode", m.String(), "kthread_pid", got.PID, "cpu", cpu)
	}
	return restore, nil
}

// pinTAPKthreads pins the TAP's NAPI kthreads ("napi/TAP-0", the command
// name cut to 15 bytes; a TAP's NAPI has no id, so netlink cannot name
// them) to cpu.
func pinTAPKthreads(tapName string, cpu int) ([]int, error) {
	want := "napi/" + tapName + "-"
	if len(want) > 15 {
		want = want[:15]
	}
	var pids []int
	// The kthread starts when threaded is written; give it a moment.
	for try := 0; try < 50 && len(pids) == 0; try++ {
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			pid, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
			if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), want) {
				continue
			}
			if err := napi.PinKthread(pid, cpu); err != nil {
				return nil, err
			}
			pids = append(pids, pid)
		}
		if len(pids) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("--tap-napi-cpu: no NAPI kthread %q found", want)
	}
	return pids, nil
}

// reopen waits until the NIC exists again and opens its sockets.
func reopen(ctx context.Context, rc ring.Config) ([]*ring.Socket, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := net.InterfaceByName(rc.Ifname); err == nil {
			if socks, err := ring.Open(rc); err == nil {
				return socks, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, forward.ErrNICGone
		case <-t.C:
		}
	}
}

// logStats logs each queue's rates over the last interval until ctx ends.
func logStats(ctx context.Context, log *slog.Logger, fw *forward.Forwarder, every time.Duration) {
	type snap struct{ nicRx, nicRxB, tapRx, tapRxB, drops uint64 }
	read := func(q *forward.Queue) snap {
		c := &q.C
		var d uint64
		for i := range c.NICToTAP.Drops {
			d += c.NICToTAP.Drops[i].Load() + c.TAPToNIC.Drops[i].Load()
		}
		return snap{c.NICToTAP.Rx.Packets.Load(), c.NICToTAP.Rx.Bytes.Load(), c.TAPToNIC.Rx.Packets.Load(), c.TAPToNIC.Rx.Bytes.Load(), d}
	}
	prev := make([]snap, len(fw.Queues()))
	for i, q := range fw.Queues() {
		prev[i] = read(q)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sec := now.Sub(last).Seconds()
			last = now
			for i, q := range fw.Queues() {
				cur := read(q)
				p := prev[i]
				prev[i] = cur
				log.Info("stats", "queue", q.ID,
					"nic_to_tap_pps", int((float64(cur.nicRx-p.nicRx))/sec),
					"nic_to_tap_mbps", fmt.Sprintf("%.1f", float64(cur.nicRxB-p.nicRxB)*8/sec/1e6),
					"tap_to_nic_pps", int(float64(cur.tapRx-p.tapRx)/sec),
					"tap_to_nic_mbps", fmt.Sprintf("%.1f", float64(cur.tapRxB-p.tapRxB)*8/sec/1e6),
					"drops", cur.drops-p.drops)
			}
		}
	}
}

func logTotals(log *slog.Logger, fw *forward.Forwarder) {
	for _, q := range fw.Queues() {
		c := &q.C
		var drops uint64
		for i := range c.NICToTAP.Drops {
			drops += c.NICToTAP.Drops[i].Load() + c.TAPToNIC.Drops[i].Load()
		}
		_, kdrops, _ := q.KernelStats()
		log.Info("queue totals", "queue", q.ID,
			"nic_rx_packets", c.NICToTAP.Rx.Packets.Load(), "tap_tx_packets", c.NICToTAP.Tx.Packets.Load(),
			"tap_rx_packets", c.TAPToNIC.Rx.Packets.Load(), "nic_tx_packets", c.TAPToNIC.Tx.Packets.Load(),
			"drops", drops, "errors", c.NICToTAP.Errors.Load()+c.TAPToNIC.Errors.Load(), "kernel_drops", kdrops)
	}
}

// workerCPUs turns --cpus into one CPU per queue (-1: unpinned).
func workerCPUs(spec string, queues int) ([]int, error) {
	out := make([]int, queues)
	if spec == "none" {
		for i := range out {
			out[i] = -1
		}
		return out, nil
	}
	var list []int
	if spec == "" {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return nil, err
		}
		for c := 0; c < runtime.NumCPU()*4 && c < 1024; c++ {
			if set.IsSet(c) {
				list = append(list, c)
			}
		}
	} else {
		var err error
		if list, err = cpulist.Parse(spec); err != nil {
			return nil, err
		}
	}
	if len(list) == 0 {
		return nil, errors.New("no CPUs")
	}
	for i := range out {
		out[i] = list[i%len(list)]
	}
	return out, nil
}
