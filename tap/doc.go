// Package tap opens a multiqueue Linux TAP device with a raw TUNSETIFF,
// after probing TUNGETFEATURES, and configures it (offloads, MTU, MAC,
// link state, network namespace, address).
package tap
