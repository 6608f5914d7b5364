package napi

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrNoInstances means a device has no NAPI instances to set (a veth has
// them only with GRO or XDP on).
var ErrNoInstances = errors.New("no NAPI instances")

// Threading is what SetDeviceThreaded changed on one NAPI instance.
type Threading struct {
	ID  uint32
	PID int // the kthread now polling it; 0 when the kernel reports none
}

// SetDeviceThreaded sets every NAPI instance of the device ifindex to mode
// and, when cpu >= 0, pins each instance's kthread to cpu. The changes are
// recorded in ch, so ch.Restore puts everything back; on error what was
// already changed stays recorded there.
func SetDeviceThreaded(ch *Changes, ifindex int, mode Threaded, cpu int) ([]Threading, error) {
	list, err := ch.c.List(ifindex)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("device with ifindex %d: %w", ifindex, ErrNoInstances)
	}
	var out []Threading
	for _, n := range list {
		m := mode
		if err := ch.Set(n.ID, Attrs{Threaded: &m}); err != nil {
			return out, err
		}
		got, err := ch.c.Get(n.ID)
		if err != nil {
			return out, err
		}
		if cpu >= 0 && got.PID > 0 {
			if err := ch.PinKthread(got.PID, cpu); err != nil {
				return out, err
			}
		}
		out = append(out, Threading{ID: n.ID, PID: got.PID})
	}
	return out, nil
}

// PinTAPKthreads pins the NAPI kthreads of the TAP tapName (Kthreads) to
// cpu and returns their pids. A TAP's NAPI (IFF_NAPI) has no id, so netlink
// cannot name its kthreads. The kthread starts when threaded is written, so
// PinTAPKthreads waits up to half a second for it.
func PinTAPKthreads(tapName string, cpu int) ([]int, error) {
	for try := 0; try < 50; try++ {
		pids, err := Kthreads(tapName)
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if err := PinKthread(pid, cpu); err != nil {
				return nil, err
			}
		}
		if len(pids) > 0 {
			return pids, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, fmt.Errorf("no NAPI kthread %q found for TAP %s (is its NAPI threaded?)", kthreadComm(tapName), tapName)
}

// Kthreads returns the pids of the NAPI kthreads of device dev, found by
// command name: the kernel names them "napi/DEV-ID" cut to 15 bytes
// (net/core/dev.c: napi_kthread_create; TASK_COMM_LEN), so with a long
// device name the kthreads of devices sharing its first bytes match too.
func Kthreads(dev string) ([]int, error) {
	prefix := kthreadComm(dev)
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(comm)), prefix) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// kthreadComm is the start of the command names of dev's NAPI kthreads.
func kthreadComm(dev string) string {
	c := "napi/" + dev + "-"
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}
