// Package forward runs the workers that move frames between TAP queues, packet
// sockets and guest ports: one pinned loop each, virtio-net header fix-ups,
// every frame counted.
package forward
