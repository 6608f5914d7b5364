package prom

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// ServerAddr is where StartServer serves Prometheus's HTTP API, in bed's
// fwd namespace.
const ServerAddr = "127.0.0.1:9090"

// StartServer runs prometheus in bed's fwd namespace with config (the
// text of a prometheus.yml) and its storage in a temporary directory,
// listening on ServerAddr, and waits until it is ready; its Output is
// what it logged. It is killed when t ends.
func StartServer(t testing.TB, bed *testbed.Bed, config string) *testbed.Process {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := bed.Start(bed.FwdNS, "prometheus", "prometheus", "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+ServerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+ServerAddr+"/-/ready"); err == nil && code == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20 s:\n%s", p.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Query runs an instant query now against the Prometheus of
// StartServer and returns the first result's value (0 for none).
func Query(t testing.TB, bed *testbed.Bed, query string) float64 {
	t.Helper()
	return QueryAt(t, bed, query, time.Time{})
}

// QueryAt runs an instant query evaluated at time at (now when zero)
// and returns the first result's value (0 for none).
func QueryAt(t testing.TB, bed *testbed.Bed, query string, at time.Time) float64 {
	t.Helper()
	q := url.Values{"query": {query}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1e3, 'f', 3, 64))
	}
	_, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+ServerAddr+"/api/v1/query?"+q.Encode())
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
