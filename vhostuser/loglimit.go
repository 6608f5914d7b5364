package vhostuser

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Every line a front-end or its guest can make the port log goes through
// a logLimiter: a peer that reconnects, toggles its rings or sets up rings
// beyond the port's in a loop must not decide how much the process logs
// (under journald's rate limit a flood would also hide everyone else's
// lines).
//
// logLimits are what a port's limiter takes when it is made (a variable
// for tests): 10 lines of one kind per 10 seconds.
var logLimits = struct {
	burst    int
	interval time.Duration
}{10, 10 * time.Second}

// logLimiter passes the first burst lines of each kind (a kind is the
// line's message) per interval and counts the rest; when an interval in
// which lines were held back ends, it logs one line saying how many, so
// that nothing goes unreported, only unrepeated.
type logLimiter struct {
	log      *slog.Logger
	burst    int
	interval time.Duration

	mu    sync.Mutex
	kinds map[string]*logKind
}

type logKind struct {
	start      time.Time // the interval's
	passed     int
	suppressed int
	level      slog.Level
	timer      *time.Timer // reports suppressed when the interval ends
}

func newLogLimiter(log *slog.Logger, burst int, interval time.Duration) *logLimiter {
	return &logLimiter{log: log, burst: burst, interval: interval, kinds: make(map[string]*logKind)}
}

func (l *logLimiter) Info(msg string, args ...any)  { l.emit(slog.LevelInfo, msg, args) }
func (l *logLimiter) Warn(msg string, args ...any)  { l.emit(slog.LevelWarn, msg, args) }
func (l *logLimiter) Error(msg string, args ...any) { l.emit(slog.LevelError, msg, args) }

// emit logs msg unless its kind used up this interval's lines.
func (l *logLimiter) emit(level slog.Level, msg string, args []any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.mu.Lock()
	k := l.kinds[msg]
	now := time.Now()
	if k == nil {
		k = &logKind{start: now}
		l.kinds[msg] = k
	}
	if now.Sub(k.start) >= l.interval && k.timer == nil {
		k.start, k.passed = now, 0
	}
	pass := k.passed < l.burst
	if pass {
		k.passed++
	} else {
		k.suppressed++
		k.level = max(k.level, level)
		if k.timer == nil {
			k.timer = time.AfterFunc(l.interval-now.Sub(k.start), func() { l.report(msg) })
		}
	}
	l.mu.Unlock()
	if pass {
		l.log.Log(context.Background(), level, msg, args...)
	}
}

// report logs how many lines of kind msg were held back and starts its
// next interval.
func (l *logLimiter) report(msg string) {
	l.mu.Lock()
	k := l.kinds[msg]
	n, level := k.suppressed, k.level
	k.suppressed, k.timer, k.start, k.passed = 0, nil, time.Now(), 0
	l.mu.Unlock()
	if n > 0 {
		l.log.Log(context.Background(), level, "vhost-user: similar lines suppressed", "line", msg, "suppressed", n,
			"within", l.interval)
	}
}

// flush reports every kind's held-back lines now (the port closes).
func (l *logLimiter) flush() {
	l.mu.Lock()
	var pending []string
	for msg, k := range l.kinds {
		if k.timer != nil && k.timer.Stop() {
			pending = append(pending, msg)
		}
	}
	l.mu.Unlock()
	for _, msg := range pending {
		l.report(msg)
	}
}
