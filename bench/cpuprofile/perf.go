package cpuprofile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Perf runs Linux's perf, when it is installed and the kernel lets it
// sample: the kernel's side of a run, which a Go profile sees only as
// the time of a system call.
type Perf struct {
	path string
	// Note says what perf can do here, or why it is not used.
	Note string
}

// ProbePerf finds perf and tries it: a software-clock sample of every
// CPU (cpu-clock needs no hardware counter, which a VM often lacks)
// with call chains. It returns nil, with the reason in the note, when
// perf is missing or refuses.
func ProbePerf(ctx context.Context) (*Perf, string) {
	path, err := exec.LookPath("perf")
	if err != nil {
		return nil, "perf not installed (Debian: apt-get install linux-perf): no kernel-side view"
	}
	p := &Perf{path: path}
	tmp, err := os.MkdirTemp("", "tapfwd-perf")
	if err != nil {
		return nil, "perf: " + err.Error()
	}
	defer os.RemoveAll(tmp)
	if err := p.record(ctx, tmp+"/probe.data", 100*time.Millisecond); err != nil {
		return nil, "perf record refused (" + err.Error() + "): no kernel-side view"
	}
	hw := "hardware counters work"
	if out, _ := exec.CommandContext(ctx, path, "stat", "-x,", "-e", "instructions", "true").CombinedOutput(); strings.Contains(string(out), "not supported") || strings.Contains(string(out), "not counted") {
		hw = "hardware counters are not supported (perf stat -e instructions): the samples are timer-driven, so time with interrupts off is charged where they come back on (an irq-enable or unlock function); the paths below go by the whole call chain, which that does not move"
	}
	p.Note = "perf record -e cpu-clock -F " + strconv.Itoa(perfHz) + " -a -g: every CPU, every process; " + hw
	return p, p.Note
}

// perfHz is the sampling rate: about one sample a millisecond per CPU.
const perfHz = 999

// record samples every CPU for d into file.
func (p *Perf) record(ctx context.Context, file string, d time.Duration) error {
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	// -B -N: no build-id collection afterwards, which takes seconds on a
	// busy machine.
	out, err := exec.CommandContext(ctx, p.path, "record", "-q", "-B", "-N", "-e", "cpu-clock", "-F", strconv.Itoa(perfHz), "-a", "-g",
		"-o", file, "--", "sleep", secs).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Record samples every CPU for d into file.
func (p *Perf) Record(ctx context.Context, file string, d time.Duration) error {
	if err := p.record(ctx, file, d); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	return nil
}

// Samples reads the samples of a file Record made.
func (p *Perf) Samples(ctx context.Context, file string) ([]PerfSample, error) {
	cmd := exec.CommandContext(ctx, p.path, "script", "-i", file, "-F", "comm,tid,cpu,ip,sym,dso")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	samples, perr := ParsePerfScript(out)
	io.Copy(io.Discard, out)
	if err := errors.Join(cmd.Wait(), perr); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	return samples, nil
}

// PerfSample is one sample of perf script: the task it interrupted and
// its call chain, split into the kernel's frames and user space's, leaf
// first; kernel symbols without their compiler suffix (".isra.0").
type PerfSample struct {
	Comm   string
	TID    int
	CPU    int
	Kernel []string
	User   []string
}

var perfHeader = regexp.MustCompile(`^(\S.*?)\s+(-?\d+)\s+\[(\d+)\]`)

// ParsePerfScript reads the output of perf script -F
// comm,tid,cpu,ip,sym,dso: a header line per sample ("comm tid [cpu]"),
// then a tab-indented frame per line ("address symbol (dso)"), then a
// blank line.
func ParsePerfScript(r io.Reader) ([]PerfSample, error) {
	var out []PerfSample
	var cur *PerfSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		if line[0] != '\t' && line[0] != ' ' {
			m := perfHeader.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("perf script: unexpected line %q", line)
			}
			tid, _ := strconv.Atoi(m[2])
			cpu, _ := strconv.Atoi(m[3])
			out = append(out, PerfSample{Comm: m[1], TID: tid, CPU: cpu})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		addr, sym, kernel := parseFrame(line)
		if addr == "" {
			continue
		}
		if kernel {
			cur.Kernel = append(cur.Kernel, sym)
		} else {
			cur.User = append(cur.User, sym)
		}
	}
	return out, sc.Err()
}

// parseFrame reads "\tffffffff8225f759 pvm_irq_enable ([kernel.kallsyms])":
// kernel addresses are those of the upper half.
func parseFrame(line string) (addr, sym string, kernel bool) {
	line = strings.TrimSpace(line)
	addr, rest, ok := strings.Cut(line, " ")
	if !ok {
		return "", "", false
	}
	if i := strings.LastIndex(rest, " ("); i >= 0 {
		rest = rest[:i]
	}
	sym = strings.TrimSpace(rest)
	if a, err := strconv.ParseUint(addr, 16, 64); err == nil && a >= 1<<63 {
		kernel = true
		sym, _, _ = strings.Cut(sym, "+")
		sym, _, _ = strings.Cut(sym, ".")
	}
	return addr, sym, kernel
}
