// Package forward runs the per-queue workers that move frames between a
// TAP queue and a packet socket, applying the vnethdr fix-ups and counting
// everything they deliver or drop.
package forward
