package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Per-device IP settings: the files under /proc/sys/net/ipv4/conf/DEV/
// and /proc/sys/net/ipv6/conf/DEV/ (Documentation/networking/ip-sysctl.rst),
// DEV a link name or "default" (what new links start with). /proc/sys/net
// shows the network namespace of the thread that opens a file there
// (net/sysctl_net.c: net_ctl_header_lookup takes current's), so they are
// read and written on a thread inside the namespace.

// IP versions for DevConf and SetDevConf.
const (
	IPv4 = "ipv4"
	IPv6 = "ipv6"
)

// ErrNoDevConf means the kernel has no such setting for the device: no
// such link, no such key, or no IPv6 (ipv6.disable=1).
var ErrNoDevConf = errors.New("no such per-device IP setting")

func devConfPath(version, dev, key string) (string, error) {
	if version != IPv4 && version != IPv6 {
		return "", fmt.Errorf("IP version %q: want ipv4 or ipv6", version)
	}
	for _, s := range []string{dev, key} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
			return "", fmt.Errorf("bad device setting name %q", s)
		}
	}
	return filepath.Join("/proc/sys/net", version, "conf", dev, key), nil
}

// DevConf reads setting key of device dev (or "default") for IP version
// (IPv4, IPv6), in n.
func (n *NS) DevConf(version, dev, key string) (string, error) {
	path, err := devConfPath(version, dev, key)
	if err != nil {
		return "", err
	}
	var v string
	err = n.Do(func() error {
		b, err := os.ReadFile(path)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, n.devConfErr("read", path, err)
}

// SetDevConf writes value to setting key of device dev for IP version, in
// n. It needs CAP_NET_ADMIN over n.
func (n *NS) SetDevConf(version, dev, key, value string) error {
	path, err := devConfPath(version, dev, key)
	if err != nil {
		return err
	}
	err = n.Do(func() error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(value)
		return errors.Join(err, f.Close())
	})
	return n.devConfErr("write "+value+" to", path, err)
}

func (n *NS) devConfErr(op, path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s in %s: %w: %w", op, path, n, ErrNoDevConf, err)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s %s in %s: %w: %w", op, path, n, err, ErrNotPermitted)
	}
	return fmt.Errorf("%s %s in %s: %w", op, path, n, err)
}
