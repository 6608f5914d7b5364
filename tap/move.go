package tap

import "net/netip"

// MoveToNetns moves the existing interface name (a TAP that other code
// opened, such as the bench's songgao/water baseline) into the network
// namespace netns (/run/netns/NAME), brings it up there and assigns addr
// when it is valid: what Open does for its own TAP, over rtnetlink.
func MoveToNetns(name, netns string, addr netip.Prefix) error {
	return configure(&Device{name: name}, Config{Netns: netns, Addr: addr})
}
