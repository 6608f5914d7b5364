package testkit

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testbed"
)

// PromAddr is where StartPrometheus serves Prometheus's HTTP API, in bed's
// fwd namespace.
const PromAddr = "127.0.0.1:9090"

// Prometheus is a Prometheus server a test started (StartPrometheus).
type Prometheus struct {
	mu  sync.Mutex
	log strings.Builder
}

// Write collects the server's output.
func (p *Prometheus) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

// Log is what the server printed so far.
func (p *Prometheus) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// StartPrometheus runs prometheus in bed's fwd namespace with config (the
// text of a prometheus.yml) and its storage in a temporary directory,
// listening on PromAddr, and waits until it is ready. It is killed when t
// ends.
func StartPrometheus(t testing.TB, bed *testbed.Bed, config string) *Prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{}
	cmd := bed.Command(context.Background(), bed.FwdNS, "prometheus", "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+PromAddr)
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _, err := HTTPGet(t, bed, bed.FwdNS, "http://"+PromAddr+"/-/ready"); err == nil && code == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20 s:\n%s", p.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PromQuery runs an instant query now against the Prometheus of
// StartPrometheus and returns the first result's value (0 for none).
func PromQuery(t testing.TB, bed *testbed.Bed, query string) float64 {
	t.Helper()
	return PromQueryAt(t, bed, query, time.Time{})
}

// PromQueryAt runs an instant query evaluated at time at (now when zero)
// and returns the first result's value (0 for none).
func PromQueryAt(t testing.TB, bed *testbed.Bed, query string, at time.Time) float64 {
	t.Helper()
	q := url.Values{"query": {query}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1e3, 'f', 3, 64))
	}
	_, body, err := HTTPGet(t, bed, bed.FwdNS, "http://"+PromAddr+"/api/v1/query?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || resp.Status != "success" {
		t.Fatalf("query %s: %v %s", query, err, body)
	}
	if len(resp.Data.Result) == 0 {
		return 0
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
