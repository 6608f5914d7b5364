// Package profile is where a run's time goes: tapfwd's Go CPU profile in shares, the machine per CPU
// and per thread, tapfwd's batch metrics, and the kernel's side from perf where perf works. Package
// cpuprofile reads and sorts the profiles.
package profile
