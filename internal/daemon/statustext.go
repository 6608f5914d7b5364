package daemon

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// WriteText writes st for a person, as tapfwd status prints it: the
// build and uptime, who answered (when FetchStatus could tell), the TAP
// and the NIC, a table of each queue's rates, counts and drops both ways,
// and the VM ports. Every string in st is the server's, and whoever
// answered may not be tapfwd: each is printed made printable (printable),
// so that none can move the cursor, set the title or the clipboard, or
// add a line of its own.
func (st *Status) WriteText(w io.Writer) error {
	t := st.TAP
	fmt.Fprintf(w, "tapfwd %s, up %v\n", printable(st.Build.String()), time.Duration(st.UptimeSeconds*float64(time.Second)).Round(time.Second))
	if st.AnsweredBy != nil {
		fmt.Fprintf(w, "answered %v\n", st.AnsweredBy)
	}
	where := ""
	if t.Netns != "" {
		where = " in network namespace " + printable(t.Netns)
	}
	persist := "goes away when tapfwd exits"
	if t.Persistent {
		persist = "persistent"
		if t.Attached {
			persist += " (attached to the TAP an earlier run left)"
		}
	}
	fmt.Fprintf(w, "TAP %s%s: MAC %s, MTU %d, napi %s, vnet-hdr %s, multi-queue %s, offloads %s; %s\n",
		printable(t.Name), where, printable(t.MAC), t.MTU, onOff(t.NAPI), onOff(t.VnetHdr), onOff(t.MultiQueue), printable(t.Offloads), persist)
	fmt.Fprintf(w, "NIC %s\n\n", printable(st.NIC))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rates := "rates over the last " + fmt.Sprintf("%.0f s", st.RateSeconds)
	if st.RateSeconds == 0 {
		rates = "rates after the first 5 s"
	}
	fmt.Fprintf(tw, "QUEUE\tCPU\tDIRECTION\tFRAMES/S\tMBIT/S\tRECEIVED\tSENT\tDROPS (%s)\n", rates)
	for _, q := range st.Queues {
		for _, d := range []struct {
			name string
			s    DirStatus
		}{{"nic->tap", q.NICToTAP}, {"tap->nic", q.TAPToNIC}} {
			drops := dropText(d.s.Drops)
			if d.name == "nic->tap" && q.KernelDrops > 0 {
				drops = fmt.Sprintf("kernel_ring=%d %s", q.KernelDrops, drops)
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f\t%.1f\t%d\t%d\t%s\n", q.ID, q.CPU, d.name, d.s.RxPacketsPerSecond,
				d.s.RxBytesPerSecond*8/1e6, d.s.RxPackets, d.s.TxPackets, drops)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeVMPorts(w, st.VMPorts, st.VMPortsError)
	return nil
}

// writeVMPorts lists the VM ports: a macvtap's device node, and whether
// it was added after the start; a vhost-user port's socket, state,
// counters and how to attach a guest. listErr is why the macvtaps on the
// TAP could not be listed.
func writeVMPorts(w io.Writer, ports []PortStatus, listErr string) {
	if len(ports) == 0 && listErr == "" {
		return
	}
	fmt.Fprintln(w, "\nVM ports:")
	if listErr != "" {
		fmt.Fprintf(w, "  (only those this run made: the TAP's could not be listed: %s)\n", printable(listErr))
	}
	for _, p := range ports {
		if p.Type != "vhost-user" {
			dev, origin := printable(p.Dev), ""
			if dev == "" {
				dev = "(no device node)"
			}
			if p.Origin == OriginAdded {
				origin = "  added after the start"
			}
			fmt.Fprintf(w, "  %s  %s  %s%s\n", printable(p.Name), printable(p.MAC), dev, origin)
			continue
		}
		fmt.Fprintf(w, "  %s  %s  vhost-user %s  %s\n", printable(p.Name), printable(p.MAC), printable(p.Socket), printable(p.State))
		if p.FromGuest != nil && p.ToGuest != nil {
			fmt.Fprintf(w, "    from the guest: %s, drops %s; to it: %s, drops %s\n",
				count(p.FromGuest.RxPackets, "frame"), dropText(p.FromGuest.Drops), count(p.ToGuest.TxPackets, "frame"), dropText(p.ToGuest.Drops))
		}
		if len(p.Features) > 0 {
			fmt.Fprintf(w, "    features: %s\n", printable(strings.Join(p.Features, ",")))
		}
		fmt.Fprintf(w, "    QEMU:    %s\n", printable(p.QEMU))
		fmt.Fprintf(w, "    libvirt: %s\n", printableLines(p.Libvirt, "             "))
		fmt.Fprintf(w, "             %s\n", printableLines(p.LibvirtMemory, "             "))
	}
}

// dropText is "reason=n ..." for the drops that happened, "none" if none.
// count is "1 noun" or "n nouns".
func count[N int | uint64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func dropText(m map[string]uint64) string {
	var parts []string
	for r, n := range m {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", printable(r), n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// printable is s as plain text on one line: a tab, a newline or another
// line break becomes a space, and what a terminal would act on rather
// than print is dropped: the C0 controls (ESC, and with it every CSI,
// OSC and DCS sequence's introducer), DEL, the C1 controls (U+0080 to
// U+009F, 8-bit CSI and OSC among them) and format characters such as
// the bidirectional overrides. Bytes that are not UTF-8 become U+FFFD,
// so no raw C1 byte is written either.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.IsPrint(r):
			return r
		case unicode.IsSpace(r):
			return ' '
		}
		return -1
	}, s)
}

// printableLines is printable for each line of s, the lines joined by a
// newline and indent.
func printableLines(s, indent string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n"+indent)
}
