package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/lab/need"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

const deployDir = "../deploy"

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	need.Tools(t, "promtool")
	cmd := exec.Command("promtool", args...)
	cmd.Dir = filepath.Join(deployDir, "prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesWithPromtool(t *testing.T) {
	promtool(t, "check", "rules", "rules.yml")
	promtool(t, "test", "rules", "rules_test.yml")
	promtool(t, "check", "config", "prometheus.yml")
}

// exported lists every metric name a tapfwd /metrics page can carry (with
// every option that adds series on: GRO, the TAP without vnet header), plus
// the recording rules' names.
func exported(t *testing.T) map[string]bool {
	mfs, gsrc := gatherAll(t)
	names := map[string]bool{"up": true}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	// Every described metric must also have appeared.
	ch := make(chan *prometheus.Desc, 64)
	NewCollector(gsrc).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil || !names[m[1]] {
			t.Errorf("described but not collected: %s", d)
		}
	}
	rules, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`record:\s*(\S+)`).FindAllStringSubmatch(string(rules), -1) {
		names[m[1]] = true
	}
	return names
}

// gatherAll gathers a registry as tapfwd's over every option that adds
// series (GRO, the TAP without vnet header, macvtap and vhost-user VM
// ports, AF_XDP rings), and returns the vhost-user one's source.
func gatherAll(t *testing.T) ([]*dto.MetricFamily, Source) {
	var mfs []*dto.MetricFamily
	var src Source
	for _, c := range []forward.Config{{TAPVnetHdr: true, GRO: true}, {}} {
		fw, _, _ := fakeForwarderWith(t, c)
		src = Source{TAP: "tap0", NIC: "eth1", Forwarder: fw, Features: tap.Features{Offloads: unix.TUN_F_CSUM},
			LinkStats: func(string) (netns.LinkStats, error) { return netns.LinkStats{}, nil },
			VMPorts:   func() ([]string, error) { return []string{"tfwvm0"}, nil },
			XDPRings:  func() ([]XDPRing, error) { return []XDPRing{{}}, nil }}
		got, err := NewRegistry(NewCollector(src)).Gather()
		if err != nil {
			t.Fatal(err)
		}
		mfs = append(mfs, got...)
	}
	// With a vhost-user port, for its series.
	gsrc, _ := guestSource(t)
	got, err := NewRegistry(NewCollector(gsrc)).Gather()
	if err != nil {
		t.Fatal(err)
	}
	return append(mfs, got...), gsrc
}

var metricRE = regexp.MustCompile(`\b((?:[a-z_]+:)?tapfwd[_:][a-zA-Z0-9_:]*|process_[a-z_]+|go_[a-z_]+|up)\b`)

func checkNames(t *testing.T, where, text string, names map[string]bool) int {
	n := 0
	for _, m := range metricRE.FindAllString(text, -1) {
		n++
		if !names[m] {
			t.Errorf("%s uses %s, which tapfwd does not export", where, m)
		}
	}
	return n
}

func TestDeployUsesExportedMetrics(t *testing.T) {
	names := exported(t)
	rules, _ := os.ReadFile(filepath.Join(deployDir, "prometheus", "rules.yml"))
	var exprs []string
	for _, line := range strings.Split(string(rules), "\n") {
		if strings.Contains(line, "summary:") || strings.Contains(line, "description:") {
			continue // prose
		}
		exprs = append(exprs, line)
	}
	if checkNames(t, "rules.yml", strings.Join(exprs, "\n"), names) == 0 {
		t.Error("rules.yml uses no tapfwd metric")
	}

	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "tapfwd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	want := map[string]bool{"heatmap": false}
	napiPanel := false
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		want[p.Type] = true
		for _, tg := range p.Targets {
			if checkNames(t, "dashboard panel "+p.Title, tg.Expr, names) == 0 {
				t.Errorf("panel %q: query %q uses no metric", p.Title, tg.Expr)
			}
			if strings.Contains(tg.Expr, "tapfwd_tap_info") && strings.Contains(tg.Expr, "napi") {
				napiPanel = true
			}
		}
	}
	if !want["heatmap"] || !napiPanel {
		t.Errorf("dashboard lacks the batch-size heat map (%v) or the split by napi (%v)", want["heatmap"], napiPanel)
	}
}
