# tapfwd: the two entry points the README gives (demo, test), plus helpers.
GO ?= go
BIN := bin/tapfwd
BENCH_BIN := bin/tapfwd-bench

# make install: the binaries, the systemd units and the drop-ins, a
# sample instance configuration, the Prometheus and Grafana files. DESTDIR
# stages a package's tree. The units read /etc/tapfwd/NAME.conf
# (SYSCONFDIR moves it, whatever PREFIX is).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
SHAREDIR ?= $(PREFIX)/share/tapfwd
SYSCONFDIR ?= /etc

.PHONY: all build build-tapfwd build-bench deps deps-bench deps-demo demo bench bench-docs bench-docs-vxlan perf perf-baseline profile reference test fuzz soak install uninstall clean

all: build

# The forwarder and its benchmark: tapfwd-bench starts the tapfwd next to it.
# tapfwd without cgo: a static binary, and one where dropping privileges
# (--user) reaches every thread (Go runs a system call on all threads only
# without cgo).
# Both say which commit they are (--version): the revision git describes is
# stamped in, also where GOFLAGS turns Go's own VCS stamping off
# (-buildvcs=false).
REVISION = $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS = -X github.com/tapfwd/tapfwd/internal/base/buildinfo.revision=$(REVISION)
build: build-tapfwd build-bench

build-tapfwd:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tapfwd

build-bench:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BENCH_BIN) ./cmd/tapfwd-bench

deps:
	./scripts/deps.sh test

deps-bench:
	./scripts/deps.sh bench

deps-demo:
	./scripts/deps.sh demo

# The first command: the whole product on a lab of network namespaces
# (scripts/demo.sh): tapfwd with metrics and a VM port, the test guest
# booted on it, ping, iperf3 through tapfwd and through the Linux bridge,
# tapfwd status, /metrics; then everything is removed, also on Ctrl-C. It
# needs tapfwd only (the bench binary, with its plotting libraries, is the
# longer build), built while apt-get installs what is missing: on a fresh
# machine the two take most of the time, one the network and the disk, the
# other the CPUs.
demo:
	$(MAKE) --no-print-directory -j2 deps-demo build-tapfwd
	./scripts/demo.sh

# The main job: does IFF_NAPI help on this kernel? IFF_NAPI on, and the
# TAP's NAPI threaded, against off, inside each run on two queues of one
# TAP, on the QEMU patch's six rows (tapfwd-bench throughput's default
# run, the same as tapfwd-bench napi --rows seed): at most 25 minutes.
bench: deps-bench build
	./$(BENCH_BIN) throughput $(BENCH_FLAGS)

# A throughput report to commit under docs/results/, in a folder named by
# the day and subject (the default run, at most 25 minutes; run it on a
# quiet machine, then add its line to docs/results/README.md).
bench-docs: deps-bench build
	./$(BENCH_BIN) throughput --out docs/results/$$(date -u +%F)-napi-inrun

# A run across two hosts over VXLAN to commit (docs/results/, read in
# docs/design/performance.md, "Across two hosts over VXLAN"): tapfwd on each
# host's VXLAN device against a bridge on each host, the default run of
# --topology vxlan (about 10 minutes; run it on a quiet machine).
# BENCH_VXLAN_OUT and BENCH_FLAGS (e.g. --quick) let a smoke test write
# elsewhere.
BENCH_VXLAN_OUT ?= docs/results/$(shell date -u +%F)-throughput-vxlan
bench-docs-vxlan: deps-bench build
	./$(BENCH_BIN) throughput --topology vxlan --out $(BENCH_VXLAN_OUT) $(BENCH_FLAGS)

# The guard (docs/guide/bench.md, "The guard"): tapfwd as it ships and
# Open vSwitch's userspace datapath (the peer) against the bridge on the
# five rows with targets, compared in pairs, sequential within 10 minutes
# (7 to 10 on a 2-CPU VM), then compared with the
# committed baseline: the compare's first table lists the rows that moved
# beyond their intervals. Run it as root before and after a change, on a
# quiet machine. PERF_FLAGS adds flags (e.g. --configs
# tapfwd,tap-io-uring,bridge to measure a lever beside tapfwd); PERF_OUT
# keeps the run; perf-baseline writes the baseline itself.
PERF_BASELINE ?= docs/results/perf-baseline
PERF_OUT ?= bin/perf
perf: deps-bench build
	./$(BENCH_BIN) throughput --perf --out $(PERF_OUT) $(PERF_FLAGS)
	@if [ -f $(PERF_BASELINE)/throughput.json ]; then \
		./$(BENCH_BIN) compare $(PERF_BASELINE)/throughput.json $(PERF_OUT)/throughput.json | tee $(PERF_OUT)/compare.txt; \
	else \
		echo "make perf: no baseline in $(PERF_BASELINE) to compare with: make perf-baseline writes one"; \
	fi

perf-baseline: deps-bench build
	./$(BENCH_BIN) throughput --perf --out $(PERF_BASELINE) $(PERF_FLAGS)

# Where the time goes on the guard's rows, tapfwd and the bridge: Go CPU
# profile in shares, the machine per CPU and thread, tapfwd's batches, the
# kernel side where perf works (Debian: linux-perf); about 4 minutes.
# PROFILE_FLAGS narrows it (e.g. --workload tcp-mtu-P1-w2l --seconds 20).
PROFILE_OUT ?= bin/profile
profile: deps-bench build
	./$(BENCH_BIN) profile --out $(PROFILE_OUT) $(PROFILE_FLAGS)

# The pages of docs/reference, made from the code: every subcommand's
# flags (from its flag set), the metrics (from the collector's
# descriptors), the /status schema (from its Go types and doc comments).
# Each page's TestReference compares it with the code on every make test
# and fails when it is stale; with TAPFWD_REFERENCE=update it writes it.
# go generate ./... runs this too (internal/refdoc).
REFERENCE_PKGS = ./cmd/tapfwd ./cmd/tapfwd-bench ./metrics ./internal/daemon
reference:
	TAPFWD_REFERENCE=update $(GO) test -count=1 -run '^TestReference$$' $(REFERENCE_PKGS)

# Everything CI runs: vet, the whole test suite under the race detector
# (privileged tests build their own namespaces; run as root), and a short
# pass of every fuzz target.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(MAKE) fuzz FUZZTIME=20000x

# Fuzz each target in turn (go test -fuzz takes one target at a time).
# CI's short pass counts executions (20000x) rather than time: with a
# duration, Go 1.26's fuzz coordinator can report "context deadline
# exceeded" as the time runs out (golang/go#75804, fixed in Go 1.27), a
# failure that is not a finding.
FUZZTIME ?= 60s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# Issue 7's long runs: the 60 s overload and the 5-minute soak, without the
# race detector so tapfwd's memory is that of a normal build.
soak: deps
	TAPFWD_SOAK=1 $(GO) test -count=1 -timeout 20m -v -run '^(TestOverload|TestSoak)$$' ./e2e/forwarding

# The units: tapfwd@NAME runs $(BINDIR)/tapfwd with
# $(SYSCONFDIR)/tapfwd/NAME.conf, tapfwd-netns@NS makes a namespace for
# tap-netns. Opt-in, per instance, from $(SHAREDIR)/systemd: the drop-ins
# (tap-netns, user) and the metrics socket (tapfwd@.socket). The sample
# configuration goes beside the instances' (never over a file there: it
# may have been edited) and, as shipped, into $(SHAREDIR). See
# docs/guide/service.md.
install: build
	install -D -m 755 $(BIN) $(DESTDIR)$(BINDIR)/tapfwd
	install -D -m 755 $(BENCH_BIN) $(DESTDIR)$(BINDIR)/tapfwd-bench
	install -d $(DESTDIR)$(UNITDIR)
	for u in tapfwd@.service tapfwd-netns@.service; do \
		sed -e 's|/usr/local/bin/tapfwd|$(BINDIR)/tapfwd|g' -e 's|/etc/tapfwd/|$(SYSCONFDIR)/tapfwd/|g' deploy/systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u && \
		chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -D -m 644 -t $(DESTDIR)$(SHAREDIR)/systemd deploy/systemd/tapfwd@.service.d/*.conf deploy/systemd/tapfwd@.socket
	install -D -m 644 -t $(DESTDIR)$(SHAREDIR)/prometheus deploy/prometheus/prometheus.yml deploy/prometheus/rules.yml deploy/prometheus/targets.yml
	install -D -m 644 -t $(DESTDIR)$(SHAREDIR)/grafana deploy/grafana/tapfwd.json
	install -D -m 644 -t $(DESTDIR)$(SHAREDIR) deploy/tapfwd.conf.sample
	install -d -m 755 $(DESTDIR)$(SYSCONFDIR)/tapfwd
	test -e $(DESTDIR)$(SYSCONFDIR)/tapfwd/tapfwd.conf.sample || \
		install -m 644 deploy/tapfwd.conf.sample $(DESTDIR)$(SYSCONFDIR)/tapfwd/tapfwd.conf.sample

# The configuration in $(SYSCONFDIR)/tapfwd stays: it is the admin's.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tapfwd $(DESTDIR)$(BINDIR)/tapfwd-bench
	rm -f $(DESTDIR)$(UNITDIR)/tapfwd@.service $(DESTDIR)$(UNITDIR)/tapfwd-netns@.service
	rm -rf $(DESTDIR)$(SHAREDIR)

clean:
	rm -rf bin
