package testkit

import (
	"fmt"
	"testing"
)

// Recorder is a testing.TB whose Errorf, Fatalf and Fatal record what they
// say instead of failing the test: for the tests of the kit's own checks,
// which must fail a test when they should.
type Recorder struct {
	testing.TB
	Errs []string
}

// Errorf records the message.
func (r *Recorder) Errorf(format string, args ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, args...))
}

// Fatalf records the message; the caller goes on.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, args...))
}

// Fatal records the message; the caller goes on.
func (r *Recorder) Fatal(args ...any) { r.Errs = append(r.Errs, fmt.Sprint(args...)) }
