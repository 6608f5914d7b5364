package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/forwarder"
	"github.com/tapfwd/tapfwd/bench/matrix"
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/tap"
)

// benchFlags are the flags both benches share.
type benchFlags struct {
	reps, resamples *int
	seed            *uint64
	asJSON, asMD    *bool
	outDir, from    *string
	tapfwd          *string
	verbose         *bool
}

// repsDefault is a bench's default --reps and its help.
type repsDefault struct {
	reps int
	help string
}

// addBenchFlags defines the shared flags on fs: the report's
// (addReportFlags) and the statistics' (--reps, --seed, --resamples);
// reps gives --reps its default and help.
func addBenchFlags(fs *flag.FlagSet, reps repsDefault, outFiles, fromAlso, verbose string) *benchFlags {
	b := addReportFlags(fs, outFiles, fromAlso, verbose)
	b.reps = fs.Int("reps", reps.reps, reps.help)
	b.seed, b.resamples = addBootstrapFlags(fs)
	return b
}

// addBootstrapFlags defines the bootstrap's --seed and --resamples on fs.
func addBootstrapFlags(fs *flag.FlagSet) (seed *uint64, resamples *int) {
	return fs.Uint64("seed", 1, "bootstrap seed: the same seed and samples give the same intervals"),
		fs.Int("resamples", stats.DefaultResamples, "bootstrap resamples per interval")
}

// addFormatFlags defines --json and --markdown on fs, which print what
// (the report, the comparison) in that format.
func addFormatFlags(fs *flag.FlagSet, what string) (asJSON, asMD *bool) {
	return fs.Bool("json", false, "print the "+what+" as JSON"), fs.Bool("markdown", false, "print the "+what+" as Markdown")
}

// addReportFlags defines the flags of every bench's report and binary on
// fs: outFiles names what --out writes, fromAlso what --from can render
// besides tables, verbose what --verbose logs. The statistics' flags
// are left nil (a bench without them: profile).
func addReportFlags(fs *flag.FlagSet, outFiles, fromAlso, verbose string) *benchFlags {
	from := "render a report saved with --json (or --out) instead of measuring"
	if fromAlso != "" {
		from += ": " + fromAlso
	}
	b := &benchFlags{
		outDir:  fs.String("out", "", "also write the report ("+outFiles+") into this directory; empty writes none"),
		from:    fs.String("from", "", from),
		tapfwd:  fs.String("tapfwd", "", "the tapfwd binary to measure; empty takes the tapfwd next to tapfwd-bench, else the one on $PATH"),
		verbose: fs.Bool("verbose", false, verbose),
	}
	b.asJSON, b.asMD = addFormatFlags(fs, "report")
	return b
}

// iperfFlags place the iperf3 processes of throughput workloads: the
// throughput and profile benches' --placement and --iperf-cpus.
type iperfFlags struct {
	placement, iperfCPUs *string
}

// addIperfFlags defines them on fs; both says whether --placement takes
// both (every workload twice, once under each placement).
func addIperfFlags(fs *flag.FlagSet, both bool) iperfFlags {
	modes := "pinned (the client beside tapfwd's worker, the server on the next CPU: --iperf-cpus), scheduler (where the scheduler puts it), auto (pinned with one stream, scheduler with several, where pinning starves tapfwd's worker)"
	if both {
		modes += ", or both (every workload under each, labelled)"
	}
	return iperfFlags{
		placement: fs.String("placement", throughput.PlaceAuto, "where iperf3 runs in each workload: "+modes),
		iperfCPUs: fs.String("iperf-cpus", "auto", "the CPUs of the pinned placement: WIRE,LAB, the client's (wire namespace) and the server's (lab namespace), e.g. 1,0; auto: the first CPU this process may use (where tapfwd pins its worker) and the second"),
	}
}

// place gives every workload of ws its placement (--placement,
// --iperf-cpus).
func (f iperfFlags) place(ws []throughput.Workload) ([]throughput.Workload, error) {
	pin, err := parseIperfCPUs(*f.iperfCPUs)
	if err != nil {
		return nil, err
	}
	if ws, err = throughput.Place(ws, *f.placement, pin); err != nil {
		return nil, fmt.Errorf("--placement: %w", err)
	}
	return ws, nil
}

// leverFlags set the throughput bench's lever configurations
// (throughput.Levers) that the throughput and profile benches share.
type leverFlags struct {
	groWindow *time.Duration
}

// addLeverFlags defines them on fs.
func addLeverFlags(fs *flag.FlagSet) leverFlags {
	return leverFlags{groWindow: fs.Duration("gro-window", throughput.DefaultLevers().GROWindow, "userspace GRO's --gro-window in the "+throughput.GROWindow+" configuration")}
}

// levers are the lever settings the flags give.
func (f leverFlags) levers() throughput.Levers {
	l := throughput.DefaultLevers()
	l.GROWindow = *f.groWindow
	return l
}

// check checks the shared flags after parsing (asCSV is the throughput
// bench's third format, nil for none) and returns the names of the flags
// given, so that --quick leaves them alone.
func (b *benchFlags) check(fs *flag.FlagSet, asCSV *bool) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	formats, names := 0, []string{"--json", "--markdown"}
	for _, on := range []bool{*b.asJSON, *b.asMD, asCSV != nil && *asCSV} {
		if on {
			formats++
		}
	}
	if asCSV != nil {
		names = []string{"--json", "--csv", "--markdown"}
	}
	if formats > 1 {
		return nil, fmt.Errorf("%s and %s: pick one", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	if *b.reps < 1 || *b.reps > 1000 {
		return nil, fmt.Errorf("--reps %d: want 1 to 1000", *b.reps)
	}
	if *b.resamples < 100 {
		return nil, fmt.Errorf("--resamples %d: want at least 100", *b.resamples)
	}
	return set, nil
}

func (b *benchFlags) bootstrap() stats.Bootstrap {
	return stats.Bootstrap{Seed: *b.seed, Resamples: *b.resamples}
}

// benchEnv is what a measuring bench run needs once its flags are checked:
// the binaries the beds start, the kernel's TUN features, a context that
// ends on the first SIGINT or SIGTERM (a second one kills at once), the
// log and the progress line.
type benchEnv struct {
	lab      matrix.Lab
	features uint32
	// tapfwdFlags are the flags of the tapfwd binary's run command; nil
	// when no configuration runs tapfwd.
	tapfwdFlags map[string]bool
	ctx         context.Context
	stop        context.CancelFunc
	log         *slog.Logger
	prog        *progress
	stderr      io.Writer
}

// startBench checks what every bench needs (root, namespaces, the tools
// named, a tapfwd binary when configs run one), creates the --out
// directory now rather than fail after the run, and sets up signals,
// logging and progress. The caller defers env.stop.
func startBench(kind string, b *benchFlags, configs []report.Config, stderr io.Writer, tools ...string) (*benchEnv, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("bench needs root: it builds network namespaces and TAPs (CAP_NET_ADMIN, CAP_SYS_ADMIN); run it as root, e.g. sudo tapfwd-bench %s", kind)
	}
	if err := testbed.Available(); err != nil {
		return nil, err
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("%s not found: install it with apt-get install %s", t, t)
		}
	}
	features, err := tap.Probe()
	if err != nil {
		return nil, err
	}
	env := &benchEnv{features: features, stderr: stderr, log: slog.New(slog.DiscardHandler),
		// Log lines would break a line redrawn in place.
		prog: &progress{w: stderr, tty: isTerminal(stderr) && !*b.verbose}}
	if env.lab, err = findLab(*b.tapfwd, configs); err != nil {
		return nil, err
	}
	if env.lab.Tapfwd != "" {
		if env.tapfwdFlags, err = forwarder.Supported(context.Background(), env.lab.Tapfwd); err != nil {
			return nil, fmt.Errorf("--tapfwd: %w", err)
		}
	}
	if *b.outDir != "" {
		if err := os.MkdirAll(*b.outDir, 0o755); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
	}
	if *b.verbose {
		env.log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	env.ctx, env.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal the run cleans up; a second one kills at once.
	go func() { <-env.ctx.Done(); env.stop() }()
	return env, nil
}

// findLab names the binaries the beds start: this one (for the naive
// baseline) and tapfwd, when a configuration runs it.
func findLab(tapfwd string, configs []report.Config) (matrix.Lab, error) {
	self, err := os.Executable()
	if err != nil {
		return matrix.Lab{}, fmt.Errorf("finding the tapfwd-bench binary: %w", err)
	}
	lab := matrix.Lab{Bench: self}
	for _, c := range configs {
		if c.Kind == report.KindTapfwd {
			lab.Tapfwd, err = findTapfwd(tapfwd, self)
			break
		}
	}
	return lab, err
}

// findTapfwd is the --tapfwd binary; without one, the tapfwd next to self,
// else the one on $PATH.
func findTapfwd(given, self string) (string, error) {
	if given != "" {
		if err := executable(given); err != nil {
			return "", fmt.Errorf("--tapfwd: %w", err)
		}
		return filepath.Abs(given)
	}
	next := filepath.Join(filepath.Dir(self), "tapfwd")
	if executable(next) == nil {
		return next, nil
	}
	if p, err := exec.LookPath("tapfwd"); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("no tapfwd binary: none next to this one (%s) and none on $PATH; build it (make build) or give --tapfwd PATH", next)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// finish ends the progress line and turns the run's error into what the
// user reads.
func (e *benchEnv) finish(err error) error {
	e.prog.finish()
	if errors.Is(err, matrix.ErrInterrupted) {
		return errors.New("bench interrupted: its namespaces, TAPs and processes are removed")
	}
	return err
}

// skipped tells the user about the configurations that did not run.
func (e *benchEnv) skipped(cs []report.Config) {
	for _, c := range cs {
		if c.Skipped != "" {
			fmt.Fprintf(e.stderr, "tapfwd-bench: skipped %s: %s\n", c.Name, c.Skipped)
		}
	}
}

// parseOptions parses args into fs and makes a bench's options from the
// flags with options; an error there is a misuse.
func parseOptions[O any](fs *flag.FlagSet, args []string, options func() (O, error)) (O, error) {
	if err := parse(fs, args); err != nil {
		var zero O
		return zero, err
	}
	o, err := options()
	if err != nil {
		return o, cliflag.Misuse(fs, "%w", err)
	}
	return o, nil
}

// reread renders the report saved at path (--from) instead of running the
// bench.
func reread[R any](path string, read func(string) (R, error), render func(R) error) error {
	rep, err := read(path)
	if err != nil {
		return err
	}
	return render(rep)
}

// printReport writes r to w as JSON or Markdown when asked, else as text.
func printReport(w io.Writer, r report.Documented, asJSON, asMD bool) error {
	switch {
	case asJSON:
		return report.WriteJSON(w, r)
	case asMD:
		return r.Document().WriteMarkdown(w)
	}
	return r.Document().WriteText(w)
}

// writeOut writes each rendering into dir under its file name.
func writeOut(dir string, files map[string]func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for name, write := range files {
		if err := writeFile(filepath.Join(dir, name), write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("--out: writing %s: %w", path, err)
	}
	return f.Close()
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseInts parses "64,128,4K"; kilo allows a K suffix (x1024). Values
// must be 1 to 1<<20.
func parseInts(s string, kilo bool) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		mul := 1
		if kilo && (strings.HasSuffix(f, "K") || strings.HasSuffix(f, "k")) {
			f, mul = f[:len(f)-1], 1024
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n*mul > 1<<20 {
			return nil, fmt.Errorf("bad value %q: want whole numbers from 1", f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// progress draws the bench's progress on stderr: a line rewritten in place
// on a terminal, else one line per configuration visit.
type progress struct {
	w    io.Writer
	tty  bool
	last string
	wide int
}

func (p *progress) update(s matrix.Progress) {
	line := fmt.Sprintf("bench: [%d/%d] %s rep %d/%d: %s, %s left", s.Done+1, s.Total, s.Config, s.Rep, s.Reps, s.Row, s.Left.Round(time.Second))
	if s.Reps == 0 {
		// A step outside the repetitions (the latency bench's calibration).
		line = fmt.Sprintf("bench: %s: %s, then %s", s.Config, s.Row, s.Left.Round(time.Second))
	}
	if p.tty {
		pad := max(0, p.wide-len(line))
		p.wide = len(line)
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		return
	}
	visit := fmt.Sprintf("%s/%d/%s", s.Config, s.Rep, s.Row)
	if s.Reps > 0 {
		visit = fmt.Sprintf("%s/%d", s.Config, s.Rep)
	}
	if visit != p.last {
		p.last = visit
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) finish() {
	if p.tty && p.wide > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.wide))
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
