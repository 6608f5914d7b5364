// Package forwarding tests the tapfwd binary moving frames on a test bed:
// every mode, queues, offloads, VLANs, malformed frames, overload, NAPI
// settings, and what /metrics and /status say about it.
package forwarding
