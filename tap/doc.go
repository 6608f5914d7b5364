// Package tap opens a multiqueue Linux TAP device with a raw TUNSETIFF,
// after probing TUNGETFEATURES, and configures it through package netns.
package tap
