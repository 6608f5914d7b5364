package daemon

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/uring"
)

// spinPeriod is how long each io_uring_enter of a CPU poller busy-polls
// before the poller looks whether it is to stop: the most Close waits.
const spinPeriod = time.Millisecond

// cpuPollerName is the name (comm) of the CPU poller's thread.
const cpuPollerName = "tapfwd-busypoll"

// cpuPoller busy-polls NAPI instances from a thread of its own pinned to
// one CPU, looping in io_uring_enter (uring.Poller.Spin) while the workers
// sleep in ppoll elsewhere: the busy poll on a CPU of its own. A pinned
// thread of ours rather than an SQPOLL ring's kernel thread: the Poller
// that waits for the workers spins here as it is, and stopping it is a
// flag read between two spins, where an SQPOLL thread would idle on its
// own timer and leave on the ring's close.
type cpuPoller struct {
	cpu  int
	stop atomic.Bool
	done chan error
}

// startCPUPoller starts the poller's thread on cpu, busy-polling ids, and
// returns once it spins.
func startCPUPoller(ids []uint32, cpu int) (*cpuPoller, error) {
	c := &cpuPoller{cpu: cpu, done: make(chan error, 1)}
	started := make(chan error, 1)
	go c.run(ids, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cpuPoller) run(ids []uint32, started chan<- error) {
	// Never unlocked: the thread ends with the goroutine, its pinning and
	// name with it.
	runtime.LockOSThread()
	p, err := c.setup(ids)
	started <- err
	if err != nil {
		return
	}
	for !c.stop.Load() && err == nil {
		err = p.Spin(spinPeriod)
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	c.done <- err
}

// setup pins and names the calling thread and makes its Poller, which
// must be used from the thread that made it.
func (c *cpuPoller) setup(ids []uint32) (*uring.Poller, error) {
	var set unix.CPUSet
	set.Set(c.cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pinning the busy poller to CPU %d: %w", c.cpu, os.NewSyscallError("sched_setaffinity", err))
	}
	if err := os.WriteFile("/proc/thread-self/comm", []byte(cpuPollerName), 0); err != nil {
		return nil, fmt.Errorf("naming the busy poller's thread: %w", err)
	}
	p, err := uring.NewPoller(uring.NAPI{IDs: ids, BusyPoll: spinPeriod, Prefer: true})
	if err != nil {
		return nil, fmt.Errorf("the busy poller on CPU %d: %w", c.cpu, err)
	}
	return p, nil
}

// close stops the poller and waits for its thread to end.
func (c *cpuPoller) close() error {
	c.stop.Store(true)
	return <-c.done
}
