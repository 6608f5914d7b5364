package tap

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net"
)

// The MTUs a TAP takes (drivers/net/tun.c: ETH_MIN_MTU up to 65535 less
// the Ethernet header).
const (
	MinMTU = 68
	MaxMTU = 65535 - 14
)

// HardwareAddr parses a MAC for Config.MAC ("" gives nil): six bytes, a
// unicast address other than all zeros, as an interface's own must be.
// The error says what is wanted, for the caller to name the setting.
func HardwareAddr(s string) (net.HardwareAddr, error) {
	if s == "" {
		return nil, nil
	}
	m, err := net.ParseMAC(s)
	if err != nil {
		return nil, errors.New("want six hex bytes like 02:00:00:00:00:01")
	}
	if err := CheckMAC(m); err != nil {
		return nil, err
	}
	return m, nil
}

// CheckMAC says whether m can be Config.MAC: nil (none), or six bytes of
// a unicast address other than all zeros, as an interface's own must be.
func CheckMAC(m net.HardwareAddr) error {
	switch {
	case m == nil:
		return nil
	case len(m) != 6:
		return errors.New("want six hex bytes like 02:00:00:00:00:01")
	case m[0]&1 != 0:
		return errors.New("a multicast address (the first byte is odd): want a unicast one like 02:00:00:00:00:01")
	case string(m) == "\x00\x00\x00\x00\x00\x00":
		return errors.New("all zeros is no address: want one like 02:00:00:00:00:01")
	}
	return nil
}

// StableMAC is the MAC of the TAP name in namespace ns ("" for the
// initial one) on the machine whose secret is key: a keyed hash of the
// two (HMAC-SHA256, as systemd-networkd's MACAddressPolicy=persistent
// derives one from the machine id), locally administered unicast. The
// same on every run, different for another name, namespace or machine,
// and it does not reveal the key.
func StableMAC(key []byte, ns, name string) net.HardwareAddr {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("tapfwd TAP MAC\x00" + ns + "\x00" + name))
	sum := h.Sum(nil)
	sum[0] = sum[0]&^1 | 2
	return net.HardwareAddr(sum[:6])
}
