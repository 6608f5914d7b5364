package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// installed are the files make install puts down, under PREFIX=/usr/local
// and SYSCONFDIR=/etc.
var installed = []string{
	"usr/local/bin/tapfwd", "usr/local/bin/tapfwd-bench",
	"usr/local/lib/systemd/system/tapfwd@.service", "usr/local/lib/systemd/system/tapfwd-netns@.service",
	"usr/local/share/tapfwd/systemd/netns.conf", "usr/local/share/tapfwd/systemd/user.conf",
	"usr/local/share/tapfwd/systemd/tapfwd@.socket",
	"usr/local/share/tapfwd/prometheus/prometheus.yml", "usr/local/share/tapfwd/prometheus/rules.yml",
	"usr/local/share/tapfwd/prometheus/targets.yml", "usr/local/share/tapfwd/grafana/tapfwd.json",
	"usr/local/share/tapfwd/tapfwd.conf.sample", "etc/tapfwd/tapfwd.conf.sample",
}

// makeInstall runs the Makefile's install (or another target) with vars,
// its binaries the test binary itself (make -o build: nothing is built).
func makeInstall(t *testing.T, target string, vars ...string) {
	t.Helper()
	testkit.NeedTools(t, "make")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-C", testkit.ModuleRoot(t), "-o", "build", target, "BIN=" + self, "BENCH_BIN=" + self}, vars...)
	if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestInstallKeepsConfig installs twice into one DESTDIR: the first puts
// down every file, the sample configuration among them, in /etc/tapfwd and
// in the share directory; an edit to /etc/tapfwd's copy in between survives
// the second, while the share directory's copy is the shipped one again;
// uninstall leaves /etc/tapfwd alone.
func TestInstallKeepsConfig(t *testing.T) {
	dest := t.TempDir()
	makeInstall(t, "install", "DESTDIR="+dest)
	for _, f := range installed {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Errorf("make install did not put down %s: %v", f, err)
		}
	}
	sample := readFile(t, "tapfwd.conf.sample")
	etc := filepath.Join(dest, "etc/tapfwd/tapfwd.conf.sample")
	share := filepath.Join(dest, "usr/local/share/tapfwd/tapfwd.conf.sample")
	if got := readFile(t, etc); got != sample {
		t.Fatalf("%s is not deploy/tapfwd.conf.sample:\n%s", etc, got)
	}
	edited := strings.Replace(sample, "nic = eth1", "nic = eno2", 1)
	writeFile(t, etc, edited)
	writeFile(t, share, "stale\n")
	makeInstall(t, "install", "DESTDIR="+dest)
	if got := readFile(t, etc); got != edited {
		t.Errorf("the second make install replaced the edited %s", etc)
	}
	if got := readFile(t, share); got != sample {
		t.Errorf("the second make install left %s as it was, want the shipped sample", share)
	}
	makeInstall(t, "uninstall", "DESTDIR="+dest)
	if got := readFile(t, etc); got != edited {
		t.Errorf("make uninstall removed or changed %s", etc)
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/local/lib/systemd/system/tapfwd-netns@.service")); err == nil {
		t.Error("make uninstall left tapfwd-netns@.service")
	}
}

// TestInstalledUnits installs under a temporary PREFIX and SYSCONFDIR
// and checks the installed units with systemd-analyze verify as an
// instance would load them: tapfwd@lab1.service with netns.conf and the
// ordering drop-in tapfwd-netns@.service documents, tapfwd-netns@lab
// itself, and tapfwd@lab1.socket copied from the share directory. Without
// tapfwd-netns@.service the instance's Requires= fails verify: the
// drop-in really pulls the namespace's unit in.
func TestInstalledUnits(t *testing.T) {
	testkit.NeedTools(t, "systemd-analyze")
	root := t.TempDir()
	makeInstall(t, "install", "PREFIX="+root+"/usr", "SYSCONFDIR="+root+"/etc")
	units := filepath.Join(root, "usr/lib/systemd/system")
	share := filepath.Join(root, "usr/share/tapfwd/systemd")
	unit := readFile(t, filepath.Join(units, "tapfwd@.service"))
	if want := "ExecStart=" + root + "/usr/bin/tapfwd run --config " + root + "/etc/tapfwd/%i.conf\n"; !strings.Contains(unit, want) {
		t.Errorf("the installed unit lacks %q", want)
	}
	dropIn := netnsDropIn(t, readFile(t, filepath.Join(units, "tapfwd-netns@.service")))
	writeFile(t, filepath.Join(units, "tapfwd@lab1.service.d/lab-netns.conf"), dropIn)
	writeFile(t, filepath.Join(units, "tapfwd@lab1.service.d/netns.conf"), readFile(t, filepath.Join(share, "netns.conf")))
	writeFile(t, filepath.Join(units, "tapfwd@lab1.socket"), readFile(t, filepath.Join(share, "tapfwd@.socket")))
	for link, target := range map[string]string{"tapfwd@lab1.service": "tapfwd@.service", "tapfwd-netns@lab.service": "tapfwd-netns@.service"} {
		if err := os.Symlink(target, filepath.Join(units, link)); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(name string) (string, error) {
		cmd := exec.Command("systemd-analyze", "verify", "./"+name)
		cmd.Dir = units
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, name := range []string{"tapfwd@lab1.service", "tapfwd-netns@lab.service", "tapfwd@lab1.socket"} {
		if out, err := verify(name); err != nil || out != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
	if err := os.Remove(filepath.Join(units, "tapfwd-netns@.service")); err != nil {
		t.Fatal(err)
	}
	if out, err := verify("tapfwd@lab1.service"); err == nil || !strings.Contains(out, "tapfwd-netns@lab.service not found") {
		t.Errorf("without tapfwd-netns@.service, verify said %v:\n%s\nwant the instance's Requires= unmet", err, out)
	}
}

// netnsDropIn is the per-instance drop-in the comment of
// tapfwd-netns@.service shows, the lines after its path's line.
func netnsDropIn(t *testing.T, unit string) string {
	t.Helper()
	_, after, ok := strings.Cut(unit, "#   # /etc/systemd/system/tapfwd@lab1.service.d/lab-netns.conf\n")
	var lines []string
	for l := range strings.SplitSeq(after, "\n") {
		text, ok := strings.CutPrefix(l, "#   ")
		if !ok {
			break
		}
		lines = append(lines, text)
	}
	if !ok || len(lines) != 3 || !strings.HasPrefix(lines[1], "Requires=tapfwd-netns@lab.service") {
		t.Fatalf("tapfwd-netns@.service shows no drop-in [Unit] Requires= After= for tapfwd@lab1 (got %q)", lines)
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestInstalledPrometheus checks the installed prometheus.yml with
// promtool: valid, its rules found, and targets.yml, the instances'
// file_sd list beside it, found and valid (promtool only warns of a
// missing one: any warning fails).
func TestInstalledPrometheus(t *testing.T) {
	testkit.NeedTools(t, "promtool")
	dest := t.TempDir()
	makeInstall(t, "install", "DESTDIR="+dest)
	cmd := exec.Command("promtool", "check", "config", "prometheus.yml")
	cmd.Dir = filepath.Join(dest, "usr/local/share/tapfwd/prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "WARNING") || !strings.Contains(string(out), "SUCCESS: 1 rule files found") {
		t.Errorf("promtool check config on the installed prometheus.yml: %v\n%s", err, out)
	}
	if !strings.Contains(readFile(t, filepath.Join(cmd.Dir, "prometheus.yml")), "file_sd_configs:") {
		t.Error("the installed prometheus.yml does not read its targets from a file (file_sd_configs)")
	}
}
