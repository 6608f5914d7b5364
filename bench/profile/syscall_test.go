package profile

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkNullSyscall is what one system call costs on this host when
// the kernel does next to nothing (getppid): its entry and exit, which
// page-table isolation without PCID makes dear (see docs/design/performance.md).
// cpu-ns/op is the thread's CPU time per call, which preemption on a
// loaded machine does not inflate as it does ns/op. Raw leaves out the Go
// runtime's entersyscall/exitsyscall around the call.
func BenchmarkNullSyscall(b *testing.B) {
	for _, raw := range []bool{false, true} {
		name := map[bool]string{false: "go", true: "raw"}[raw]
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start := threadCPU()
			for b.Loop() {
				if raw {
					unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
				} else {
					unix.Syscall(unix.SYS_GETPPID, 0, 0, 0)
				}
			}
			b.ReportMetric(float64(threadCPU()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
