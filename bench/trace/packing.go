package trace

// How the sender's TCP packed a run's data (Run.Packing). With small
// writes a TCP connection settles, early in the run, into one of two
// states and stays there: it sends what the application wrote since the
// last ACK as one large GSO packet and the receiver ACKs each of those,
// or it sends about one segment per packet and the receiver ACKs every
// second one. The second costs a forwarder several times the CPU per
// byte (a frame per segment, an ACK per two), which on a machine with
// few CPUs comes out of the sender's or the receiver's time.
const (
	// Coalesced: the sender's IP packets averaged more than
	// PerSegmentMax bytes (GSO packets of several segments).
	Coalesced = "coalesced"
	// PerSegment: they averaged PerSegmentMax bytes or less, about one
	// full-sized segment each.
	PerSegment = "per-segment"
)

// PerSegmentMax is the most bytes an IP packet of a PerSegment run
// carries on average: two Ethernet-MTU frames. Runs of either state
// measured on the bench's bed lie far from it (1.2 to 1.6 KB against 5
// to 54 KB per packet; docs/design/bench-method.md, "Why the 128 B rows were
// bimodal").
const PerSegmentMax = 3000

// Packing is Coalesced or PerSegment for a run whose sender's IP packets
// were mostly TCP's, from the sender's counters; "" when the trace lacks
// them or the packets were mostly not TCP (a UDP run: Tcp.OutSegs, which
// counts the segments of each GSO packet, falls short of the packets).
func (r *Run) Packing() string {
	pkts, segs := r.Sender["Ip.OutRequests"], r.Sender["Tcp.OutSegs"]
	if pkts <= 0 || 2*segs < pkts {
		return ""
	}
	if r.Sender["IpExt.OutOctets"] > PerSegmentMax*pkts {
		return Coalesced
	}
	return PerSegment
}
