// Package cpuprofile reads CPU profiles and sorts their samples: Go's
// pprof profiles into shares of tapfwd's work, its top functions and the
// functions its system calls come from; perf's samples (perf record and
// perf script, where perf works) into the kernel's paths, the tasks they
// ran for and the top kernel functions. Package profile takes them over
// a run's window.
package cpuprofile
