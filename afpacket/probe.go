package afpacket

import (
	"golang.org/x/sys/unix"
)

// Option is one AF_PACKET socket option and whether this kernel takes it.
type Option struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Err  string `json:"error,omitempty"`
}

// Probe tries, on a throw-away socket bound to the loopback device of the
// current namespace, each AF_PACKET option tapfwd uses, in the order Open
// sets them. It needs CAP_NET_RAW.
func Probe() ([]Option, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []Option
	try := func(name string, err error) {
		o := Option{Name: name, OK: err == nil}
		if err != nil {
			o.Err = err.Error()
		}
		out = append(out, o)
	}
	try("PACKET_VNET_HDR", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1))
	try("PACKET_VNET_HDR_SZ(12)", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR_SZ, 12))
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1) // back to 10 bytes
	try("PACKET_AUXDATA", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1))
	try("PACKET_QDISC_BYPASS", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1))
	try("SO_RCVBUFFORCE", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, DefaultBufBytes))
	// Fanout needs a running (bound) socket.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: 1}); err != nil {
		try("bind(lo)", err)
		return out, nil
	}
	arg := (unix.PACKET_FANOUT_HASH | unix.PACKET_FANOUT_FLAG_UNIQUEID | unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16
	try("PACKET_FANOUT(hash|UNIQUEID|IGNORE_OUTGOING)", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, arg))
	return out, nil
}
