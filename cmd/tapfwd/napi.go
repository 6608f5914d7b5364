package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/napi"
)

const napiUsage = `Usage: tapfwd napi COMMAND [flags]

Commands:
  list   NAPI instances: queues, threaded mode, kthread, IRQ deferral
  set    change one NAPI instance (one-shot: nothing is restored)

NAPI instances belong to a network namespace: run tapfwd in the device's
namespace (ip netns exec NS tapfwd napi ...). A veth has NAPI instances
only with GRO or XDP on. Run "tapfwd napi COMMAND -h" for a command's flags.
`

func cmdNapi(args []string, stdout, stderr io.Writer) error {
	return cliflag.Dispatch("tapfwd napi", napiUsage, args, map[string]cliflag.Command{
		"list": func(a []string) error { return napiList(a, stdout) },
		"set":  func(a []string) error { return napiSet(a, stdout) },
	}, stdout, stderr)
}

func napiList(args []string, stdout io.Writer) error {
	fs := newFlagSet("napi list", "napi list [--dev IFACE] [--json]", stdout)
	dev := fs.String("dev", "", "network device to list, e.g. eth0; empty lists every device in this network namespace")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	ifindex := 0
	if *dev != "" {
		ifi, err := net.InterfaceByName(*dev)
		if err != nil {
			return fmt.Errorf("napi list: --dev %s: no such network device in this network namespace", cliflag.Quote(*dev))
		}
		ifindex = ifi.Index
	}
	c, err := napi.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	rows, err := c.Instances(ifindex)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		where := "in this network namespace"
		if *dev != "" {
			where = "on " + *dev
		}
		fmt.Fprintf(stdout, "no NAPI instances %s (a veth has them only with GRO or XDP on)\n", where)
		return nil
	}
	return napiTable(stdout, rows)
}

func napiTable(stdout io.Writer, rows []napi.Instance) error {
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDEV\tIRQ\tQUEUES\tTHREADED\tPID\tKTHREAD CPUS\tSCHED\tDEFER-HARD-IRQS\tGRO-FLUSH-TIMEOUT\tIRQ-SUSPEND-TIMEOUT")
	for _, r := range rows {
		irq, qs, th, pid, cpus, sched := "-", "-", "n/a", "-", "-", "-"
		if r.IRQ != nil {
			irq = strconv.Itoa(*r.IRQ)
		}
		if len(r.Queues) > 0 {
			qs = strings.Join(r.Queues, ",")
		}
		if r.Threaded != "" {
			th = r.Threaded
		}
		if k := r.Kthread; k != nil {
			pid = strconv.Itoa(k.PID)
			if k.CPUs != "" {
				cpus = k.CPUs
			}
			if k.Policy != "" {
				sched = k.Sched()
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%v\t%v\n", r.ID, r.Dev, irq, qs, th, pid, cpus, sched,
			r.DeferHardIRQs, r.GROFlushTimeoutNS, r.IRQSuspendTimeoutNS)
	}
	return w.Flush()
}

const napiSetNote = `
napi set is one-shot: it changes the kernel's settings and exits; nothing is
restored when it ends (it prints the command that undoes the NAPI settings).
tapfwd run restores what it changes itself. Disabling threaded stops the
kthread, and with it any --cpu or --fifo setting.
`

// napiSetReq is a checked `napi set` command line.
type napiSetReq struct {
	id        uint32
	attrs     napi.Attrs
	cpu, fifo int
}

func napiSet(args []string, stdout io.Writer) error {
	r, err := parseNapiSet(args, stdout)
	if err != nil {
		return err
	}
	c, err := napi.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	before, err := c.Get(r.id)
	if err != nil {
		return err
	}
	mode := before.Threaded
	if r.attrs.Threaded != nil {
		mode = *r.attrs.Threaded
	}
	if (r.cpu >= 0 || r.fifo != 0) && mode == napi.ThreadedDisabled {
		return fmt.Errorf("napi set: --cpu and --fifo act on the NAPI's kthread, and NAPI %d is not threaded: add --threaded enabled", r.id)
	}
	prev, err := c.Set(r.id, r.attrs)
	if err != nil {
		return err
	}
	after, err := c.Get(r.id)
	if err != nil {
		return err
	}
	return r.report(stdout, prev, after)
}

func parseNapiSet(args []string, stdout io.Writer) (*napiSetReq, error) {
	fs := newFlagSet("napi set", "napi set --id N [flags]", stdout)
	usage := fs.Usage
	fs.Usage = func() { usage(); fmt.Fprint(stdout, napiSetNote) }
	id := fs.Uint("id", 0, "NAPI instance id, as tapfwd napi list shows it (required)")
	threaded := fs.String("threaded", "", "polling mode: disabled (softirq), enabled (a napi/DEV-ID kthread polls; Linux 6.17+) or busy-poll (the kthread polls nonstop, one CPU at 100%; Linux 6.19+); empty leaves it unchanged")
	deferIRQs := fs.Uint("defer-hard-irqs", 0, "number of empty polls before the device's hard IRQs are re-enabled (a count, at most 2147483647); 0 turns deferral off; unchanged when not given")
	gro := fs.Duration("gro-flush-timeout", 0, "how long GRO may hold packets before a timer flushes them, e.g. 50us (nanosecond resolution); 0 flushes at the end of every poll; unchanged when not given")
	irqSuspend := fs.Duration("irq-suspend-timeout", 0, "longest time IRQs stay suspended while an epoll busy poller keeps finding events, e.g. 20ms; 0 turns suspension off; unchanged when not given")
	r := &napiSetReq{}
	fs.IntVar(&r.cpu, "cpu", -1, "pin the NAPI's kthread to this CPU number (needs threaded enabled or busy-poll); -1 leaves its CPU affinity unchanged")
	fs.IntVar(&r.fifo, "fifo", 0, "run the NAPI's kthread under SCHED_FIFO at this real-time priority, 1 to 99 (needs threaded enabled or busy-poll); 0 leaves its scheduling unchanged")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case !given["id"]:
		return nil, cliflag.Misuse(fs, "--id is required")
	case len(given) == 1:
		return nil, cliflag.Misuse(fs, "nothing to set: give --threaded, --defer-hard-irqs, --gro-flush-timeout, --irq-suspend-timeout, --cpu or --fifo")
	case *id == 0 || *id > 1<<32-1:
		return nil, cliflag.Misuse(fs, "--id %d: not a NAPI id (tapfwd napi list shows them)", *id)
	case r.cpu < -1:
		return nil, cliflag.Misuse(fs, "--cpu %d: want a CPU number, or -1 to leave the affinity alone", r.cpu)
	case r.fifo != 0 && (r.fifo < napi.MinFIFOPriority || r.fifo > napi.MaxFIFOPriority):
		return nil, cliflag.Misuse(fs, "--fifo %d: want a priority from %d to %d, or 0 to leave scheduling alone", r.fifo, napi.MinFIFOPriority, napi.MaxFIFOPriority)
	}
	r.id = uint32(*id)
	if given["threaded"] {
		t, err := napi.ParseThreaded(*threaded)
		if err != nil {
			return nil, cliflag.Misuse(fs, "--threaded %s: want disabled, enabled or busy-poll", cliflag.Quote(*threaded))
		}
		r.attrs.Threaded = &t
	}
	if err := r.durations(given, *deferIRQs, *gro, *irqSuspend); err != nil {
		return nil, cliflag.Misuse(fs, "%w", err)
	}
	return r, nil
}

// durations checks and takes the IRQ deferral and timeout flags given.
func (r *napiSetReq) durations(given map[string]bool, deferIRQs uint, gro, irqSuspend time.Duration) error {
	if given["defer-hard-irqs"] {
		if deferIRQs > 1<<31-1 {
			return fmt.Errorf("--defer-hard-irqs %d: want at most 2147483647", deferIRQs)
		}
		r.attrs.DeferHardIRQs = new(uint32(deferIRQs))
	}
	if given["gro-flush-timeout"] {
		if gro < 0 {
			return fmt.Errorf("--gro-flush-timeout %v: must not be negative", gro)
		}
		r.attrs.GROFlushTimeout = &gro
	}
	if given["irq-suspend-timeout"] {
		if irqSuspend < 0 {
			return fmt.Errorf("--irq-suspend-timeout %v: must not be negative", irqSuspend)
		}
		r.attrs.IRQSuspendTimeout = &irqSuspend
	}
	return nil
}

// report prints what changed and how to undo it, then applies the kthread
// settings (CPU, FIFO), which have no undo line: they end with the kthread.
func (r *napiSetReq) report(stdout io.Writer, prev napi.Attrs, after napi.NAPI) error {
	dev := strconv.Itoa(after.Ifindex)
	if ifi, err := net.InterfaceByIndex(after.Ifindex); err == nil {
		dev = ifi.Name
	}
	fmt.Fprintf(stdout, "NAPI %d on %s:\n", r.id, dev)
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	var undo []string
	a := r.attrs
	if a.Threaded != nil {
		fmt.Fprintf(w, "  threaded\t%v -> %v\n", prev.Threaded, after.Threaded)
		undo = append(undo, "--threaded "+prev.Threaded.String())
	}
	if a.DeferHardIRQs != nil {
		fmt.Fprintf(w, "  defer-hard-irqs\t%d -> %d\n", *prev.DeferHardIRQs, after.DeferHardIRQs)
		undo = append(undo, fmt.Sprintf("--defer-hard-irqs %d", *prev.DeferHardIRQs))
	}
	if a.GROFlushTimeout != nil {
		fmt.Fprintf(w, "  gro-flush-timeout\t%v -> %v\n", *prev.GROFlushTimeout, after.GROFlushTimeout)
		undo = append(undo, "--gro-flush-timeout "+prev.GROFlushTimeout.String())
	}
	if a.IRQSuspendTimeout != nil {
		fmt.Fprintf(w, "  irq-suspend-timeout\t%v -> %v\n", *prev.IRQSuspendTimeout, after.IRQSuspendTimeout)
		undo = append(undo, "--irq-suspend-timeout "+prev.IRQSuspendTimeout.String())
	}
	kerr := r.kthread(w, after.PID)
	if err := w.Flush(); err != nil {
		return err
	}
	if len(undo) > 0 {
		fmt.Fprintf(stdout, "not restored on exit; to undo: tapfwd napi set --id %d %s\n", r.id, strings.Join(undo, " "))
	}
	return kerr
}

// kthread pins the NAPI's kthread and sets its scheduling as asked,
// writing what changed to w.
func (r *napiSetReq) kthread(w io.Writer, pid int) error {
	if pid == 0 {
		if r.cpu >= 0 || r.fifo != 0 {
			return fmt.Errorf("napi set: NAPI %d reports no kthread pid", r.id)
		}
		return nil
	}
	k0, err := napi.ReadKthread(pid)
	if err == nil {
		fmt.Fprintf(w, "  kthread\t%s, pid %d\n", k0.Name, k0.PID)
	}
	if err == nil && r.cpu >= 0 {
		if err = napi.PinKthread(pid, r.cpu); err == nil {
			k, _ := napi.ReadKthread(pid)
			fmt.Fprintf(w, "  kthread CPUs\t%s -> %s\n", k0.CPUs, k.CPUs)
		}
	}
	if err == nil && r.fifo != 0 {
		if err = napi.SetFIFO(pid, r.fifo); err == nil {
			k, _ := napi.ReadKthread(pid)
			fmt.Fprintf(w, "  kthread scheduling\t%s -> %s\n", k0.Sched(), k.Sched())
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("napi set: the kthread of NAPI %d (pid %d) went away: %w", r.id, pid, err)
	}
	return err
}
