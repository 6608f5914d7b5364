// Package testpmd runs DPDK's dpdk-testpmd as a second, real vhost-user
// front-end (virtio-user) or as the reference back-end (net_vhost), for tests and the bench.
package testpmd
