// Package ovs runs Open vSwitch's userspace datapath on a namespace test
// bed, as the peer a user would otherwise put between a TAP and a wire:
// ovsdb-server and ovs-vswitchd started from a temporary directory inside
// the bed's forwarder namespace (no system service, nothing outside the
// directory and the bed), a bridge with datapath_type=netdev, the bed's
// NIC as a port of type system (an AF_PACKET socket with virtio-net
// headers) and the lab's interface as a port of type tap that OVS makes
// and the package moves into the lab namespace. Userspace TSO is on:
// without it OVS carries no TCP with a veth's default offloads.
package ovs
