// Package lifecycle tests the tapfwd binary starting, stopping and failing:
// errors at start, links that flap or go, signals under load, dropped
// privileges, a service manager's notifications and the systemd unit.
package lifecycle
