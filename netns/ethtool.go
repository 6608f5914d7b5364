package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrFixedFeature means a device does not let a feature change (ethtool -k
// shows it "[fixed]"), or kept another value than the one set.
var ErrFixedFeature = errors.New("the device does not let it change")

// GRO reports whether generic receive offload is on for device dev in n
// (ethtool -k's generic-receive-offload: NETIF_F_GRO in the device's
// active features).
func (n *NS) GRO(dev string) (bool, error) {
	v, err := n.ethtoolValue(dev, unix.ETHTOOL_GGRO, 0)
	if err != nil {
		return false, fmt.Errorf("netns: reading GRO of %s in %s: %w", dev, n, err)
	}
	return v != 0, nil
}

// SetGRO turns generic receive offload on or off for device dev in n, as
// ethtool -K DEV gro on|off does, and reads it back: a device that keeps
// another value is ErrFixedFeature. It needs CAP_NET_ADMIN over n. On a
// veth, GRO on also gives the device NAPI instances (drivers/net/veth.c:
// veth_set_features), which frames from a peer that segments them itself
// reach.
func (n *NS) SetGRO(dev string, on bool) error {
	var want uint32
	if on {
		want = 1
	}
	_, err := n.ethtoolValue(dev, unix.ETHTOOL_SGRO, want)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = fmt.Errorf("%w (%w)", ErrFixedFeature, err)
	}
	if err == nil {
		var got bool
		if got, err = n.GRO(dev); err == nil && got != on {
			err = fmt.Errorf("%w: it stayed %s", ErrFixedFeature, onOff(got))
		}
	}
	if err != nil {
		return fmt.Errorf("netns: turning GRO %s on %s in %s: %w", onOff(on), dev, n, err)
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// ethtoolValue is SIOCETHTOOL with a struct ethtool_value (cmd, data) on
// device dev: a get answers data, a set sends it.
func (n *NS) ethtoolValue(dev string, cmd, data uint32) (uint32, error) {
	if len(dev) >= unix.IFNAMSIZ || dev == "" {
		return 0, fmt.Errorf("device name %q: %w", dev, unix.EINVAL)
	}
	v := struct{ cmd, data uint32 }{cmd, data}
	// struct ifreq: the name, then a union whose ifr_data points at v.
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(&v)
	err := n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		defer unix.Close(fd)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
		runtime.KeepAlive(&v)
		if errno != 0 {
			return os.NewSyscallError("ioctl SIOCETHTOOL", errno)
		}
		return nil
	})
	return v.data, err
}
