package vhostuser

import "fmt"

// Virtio feature bits the port offers (include/uapi/linux/virtio_net.h,
// virtio_ring.h, virtio_config.h; VHOST_USER_F_PROTOCOL_FEATURES from QEMU
// docs/interop/vhost-user.rst). QEMU passes a vhost-user net device's
// other bits (control queue, MAC, status) to the guest without asking the
// back-end (hw/net/vhost_net.c: user_feature_bits lists the ones it asks).
const (
	FeatureNetCsum          = 0  // the guest may send partially checksummed frames
	FeatureNetGuestCsum     = 1  // the guest takes partially checksummed frames
	FeatureNetMTU           = 3  // QEMU's host_mtu may be shown to the guest
	FeatureNetGuestTSO4     = 7  // the guest takes TCPv4 GSO frames
	FeatureNetGuestTSO6     = 8  // the guest takes TCPv6 GSO frames
	FeatureNetGuestECN      = 9  // ... with the ECN bit
	FeatureNetHostTSO4      = 11 // the guest may send TCPv4 GSO frames
	FeatureNetHostTSO6      = 12 // the guest may send TCPv6 GSO frames
	FeatureNetHostECN       = 13 // ... with the ECN bit
	FeatureNetMrgRxbuf      = 15 // a received frame may span several guest buffers (num_buffers)
	FeatureNetMQ            = 22 // several queue pairs (offered with Config.QueuePairs > 1)
	FeatureAnyLayout        = 27 // headers and data may be laid out over descriptors freely
	FeatureRingIndirectDesc = 28 // indirect descriptor tables
	FeatureRingEventIdx     = 29 // used_event/avail_event notification suppression
	FeatureProtocolFeatures = 30 // VHOST_USER_F_PROTOCOL_FEATURES
	FeatureVersion1         = 32 // virtio 1.0: little-endian rings, 12-byte header
	FeatureNetGuestUSO4     = 54 // the guest takes UDPv4 segmentation frames
	FeatureNetGuestUSO6     = 55 // the guest takes UDPv6 segmentation frames
	FeatureNetHostUSO       = 56 // the guest may send UDP segmentation frames
)

// SupportedFeatures is everything a single-queue port implements;
// Config.Features may offer less. A port of several queue pairs adds
// FeatureNetMQ.
const SupportedFeatures uint64 = 1<<FeatureNetCsum | 1<<FeatureNetGuestCsum | 1<<FeatureNetMTU |
	1<<FeatureNetGuestTSO4 | 1<<FeatureNetGuestTSO6 | 1<<FeatureNetGuestECN |
	1<<FeatureNetHostTSO4 | 1<<FeatureNetHostTSO6 | 1<<FeatureNetHostECN |
	1<<FeatureNetMrgRxbuf | 1<<FeatureAnyLayout | 1<<FeatureRingIndirectDesc | 1<<FeatureRingEventIdx |
	1<<FeatureProtocolFeatures | 1<<FeatureVersion1 |
	1<<FeatureNetGuestUSO4 | 1<<FeatureNetGuestUSO6 | 1<<FeatureNetHostUSO

// vhost-user protocol feature bits the port offers (QEMU
// docs/interop/vhost-user.rst, "Protocol features").
const (
	ProtocolMQ       = 0 // GET_QUEUE_NUM: how many queue pairs the port has
	ProtocolReplyAck = 3 // need_reply on any request
	ProtocolNetMTU   = 4 // NET_SET_MTU
)

// SupportedProtocolFeatures is every protocol feature the port offers.
const SupportedProtocolFeatures uint64 = 1<<ProtocolMQ | 1<<ProtocolReplyAck | 1<<ProtocolNetMTU

// Offloads are what the guest negotiated to take on its receive queue:
// frames Port.Write gets must need no more (segment or complete the
// checksum first), or Write refuses them with EOPNOTSUPP.
type Offloads struct {
	Csum       bool // partial checksums (VIRTIO_NET_HDR_F_NEEDS_CSUM)
	TSO4, TSO6 bool // TCP GSO frames
	ECN        bool // TCP GSO frames with the ECN bit
	USO4, USO6 bool // UDP segmentation (GSO_UDP_L4) frames
}

func offloadsOf(f uint64) Offloads {
	has := func(b uint) bool { return f&(1<<b) != 0 }
	return Offloads{
		Csum: has(FeatureNetGuestCsum), TSO4: has(FeatureNetGuestTSO4), TSO6: has(FeatureNetGuestTSO6),
		ECN: has(FeatureNetGuestECN), USO4: has(FeatureNetGuestUSO4), USO6: has(FeatureNetGuestUSO6),
	}
}

var featureNames = map[uint]string{
	FeatureNetCsum: "csum", FeatureNetGuestCsum: "guest_csum", FeatureNetMTU: "mtu",
	FeatureNetGuestTSO4: "guest_tso4", FeatureNetGuestTSO6: "guest_tso6", FeatureNetGuestECN: "guest_ecn",
	FeatureNetHostTSO4: "host_tso4", FeatureNetHostTSO6: "host_tso6", FeatureNetHostECN: "host_ecn",
	FeatureNetMrgRxbuf: "mrg_rxbuf", FeatureNetMQ: "mq", FeatureAnyLayout: "any_layout", FeatureRingIndirectDesc: "indirect_desc",
	FeatureRingEventIdx: "event_idx", FeatureProtocolFeatures: "protocol_features", FeatureVersion1: "version_1",
	FeatureNetGuestUSO4: "guest_uso4", FeatureNetGuestUSO6: "guest_uso6", FeatureNetHostUSO: "host_uso",
}

// FeatureNames names the feature bits of f the port knows, lowest bit
// first, in the lower case of the VIRTIO_NET_F_ and VIRTIO_F_ names
// ("host_tso4": the guest may send TCPv4 GSO frames); other bits as
// "bitN".
func FeatureNames(f uint64) []string {
	var out []string
	for b := uint(0); b < 64; b++ {
		if f&(1<<b) == 0 {
			continue
		}
		if n, ok := featureNames[b]; ok {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("bit%d", b))
		}
	}
	return out
}
