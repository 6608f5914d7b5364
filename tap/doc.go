// Package tap opens a multiqueue Linux TAP device with a raw TUNSETIFF,
// after probing TUNGETFEATURES, and sets its offloads, queues and NAPI.
package tap
