package cliflag

import (
	"flag"
	"strings"
	"testing"
)

func TestPrintDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("tap", "", "TAP `NAME`; empty lets the kernel pick")
	fs.Int("queues", 1, "number of queues")
	fs.Bool("persist", false, "keep the TAP")
	fs.Duration("stats-interval", 0, "how often")
	fs.String("metrics-addr", "127.0.0.1:9310", "where")
	var b strings.Builder
	PrintDefaults(&b, fs)
	got := b.String()
	for _, want := range []string{
		"  --tap NAME\n      TAP NAME; empty lets the kernel pick\n",
		"  --queues int\n      number of queues (default 1)\n",
		"  --persist\n      keep the TAP\n",
		"  --stats-interval duration\n      how often\n",
		"  --metrics-addr string\n      where (default \"127.0.0.1:9310\")\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\n  -t") {
		t.Errorf("a flag with one dash:\n%s", got)
	}
}
