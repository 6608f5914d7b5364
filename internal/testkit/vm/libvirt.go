package vm

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// libvirtDirs are where a system libvirtd keeps its configuration, sockets,
// state, logs and cache. A test's libvirtd sees private directories there
// (bind mounts in its own mount namespace), so it leaves nothing behind and
// can run beside another.
var libvirtDirs = []string{"/etc/libvirt", "/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"}

// Libvirtd is a real libvirtd (Debian's) started by a test inside a
// network namespace: a domain's <target dev='PORT' managed='no'/> is looked
// up by name in libvirtd's own namespace, so it must run where the VM port
// lives.
type Libvirtd struct {
	URI string // for virsh -c
	dir string
	cmd *exec.Cmd
	log *os.File
}

// StartLibvirtd starts libvirtd in namespace ns with private directories
// and QEMU running as root without confinement (the system packages' user
// libvirt-qemu must exist all the same: libvirtd checks it first). It is
// stopped when t ends, after its domains are destroyed.
func StartLibvirtd(t testing.TB, ns string) *Libvirtd {
	t.Helper()
	testkit.NeedTools(t, "libvirtd", "virsh", "unshare")
	if _, err := user.Lookup("libvirt-qemu"); err != nil {
		t.Fatal("no user libvirt-qemu: the libvirt-daemon-system package (or scripts/deps.sh) makes it")
	}
	l := &Libvirtd{dir: t.TempDir()}
	var mounts []string
	for i, d := range libvirtDirs {
		if _, err := os.Stat(d); err != nil {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatalf("mount point %s: %v", d, err)
			}
		}
		priv := filepath.Join(l.dir, fmt.Sprint(i))
		os.MkdirAll(priv, 0o755)
		mounts = append(mounts, fmt.Sprintf("mount --bind %s %s", priv, d))
	}
	etc := filepath.Join(l.dir, "0")
	os.WriteFile(filepath.Join(etc, "qemu.conf"), []byte("user = \"root\"\ngroup = \"root\"\ndynamic_ownership = 0\nremember_owner = 0\n"+
		"security_driver = \"none\"\nstdio_handler = \"file\"\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "libvirtd.conf"), []byte("unix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"), 0o644)
	script := "set -e; mount --make-rprivate /; " + strings.Join(mounts, "; ") +
		"; exec ip netns exec " + ns + " libvirtd -p /run/libvirt/libvirtd.pid"
	l.cmd = exec.Command("unshare", "--mount", "sh", "-c", script)
	var err error
	if l.log, err = os.Create(filepath.Join(l.dir, "libvirtd.log")); err != nil {
		t.Fatal(err)
	}
	l.cmd.Stdout, l.cmd.Stderr = l.log, l.log
	if err := l.cmd.Start(); err != nil {
		t.Fatalf("starting libvirtd: %v", err)
	}
	l.URI = "qemu:///system?socket=" + filepath.Join(l.dir, "1", "libvirt-sock")
	t.Cleanup(func() { l.stop(t) })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := l.Virsh("version"); err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd did not answer within 20 s:\n%s", l.Log())
		}
	}
}

// Virsh runs virsh against this libvirtd.
func (l *Libvirtd) Virsh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", l.URI}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// QEMULog is what libvirt logged of domain's QEMU: its command line and
// its complaints (libvirt's /var/log/libvirt/qemu/DOMAIN.log).
func (l *Libvirtd) QEMULog(domain string) string {
	b, _ := os.ReadFile(filepath.Join(l.dir, fmt.Sprint(slices.Index(libvirtDirs, "/var/log/libvirt")), "qemu", domain+".log"))
	return string(b)
}

// Log is what libvirtd wrote.
func (l *Libvirtd) Log() string {
	b, _ := os.ReadFile(l.log.Name())
	return string(b)
}

// stop destroys every running domain and stops libvirtd.
func (l *Libvirtd) stop(t testing.TB) {
	if out, err := l.Virsh("list", "--name"); err == nil {
		for _, d := range strings.Fields(out) {
			l.Virsh("destroy", d)
		}
	}
	l.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { l.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		l.cmd.Process.Kill()
		<-done
	}
	l.log.Close()
	if t.Failed() {
		t.Logf("libvirtd's log:\n%s", l.Log())
	}
}

// Console is a guest's serial console that libvirt has QEMU write to a
// file.
type Console struct{ Path string }

// Line returns the rest of the last "TFW: key ..." line so far.
func (c Console) Line(key string) (string, bool) {
	f, err := os.Open(c.Path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	v, ok := "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := tfwLine.FindStringSubmatch(strings.TrimRight(sc.Text(), "\r")); m != nil && m[1] == key {
			v, ok = m[2], true
		}
	}
	return v, ok
}

// CheckPings checks the console's "TFW: ping DST ok" line for every dst,
// naming the guest by name.
func (c Console) CheckPings(t testing.TB, name string, dsts ...netip.Addr) {
	t.Helper()
	checkPings(t, name, c.Line, dsts)
}

// Wait waits until the console says "TFW: done".
func (c Console) Wait(ctx context.Context) error {
	for {
		if _, ok := c.Line("done"); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest did not finish in time")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Output is the console so far.
func (c Console) Output() string {
	b, _ := os.ReadFile(c.Path)
	return string(b)
}

// DomainXML is a libvirt domain that boots the test guest img with its
// command line under TCG with iface (an <interface> element) and its
// serial console in the file console.
func DomainXML(name string, img Image, cmdline, iface, console string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s</kernel>
    <initrd>%s</initrd>
    <cmdline>%s</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    %s
    <serial type='file'>
      <source path='%s'/>
      <target port='0'/>
    </serial>
  </devices>
</domain>
`, name, img.Kernel, img.Initrd, cmdline, strings.ReplaceAll(iface, "\n", "\n    "), console)
}

// VhostDomainXML is DomainXML for a guest on a vhost-user port: memory is
// the <memoryBacking> element that shares the guest's memory (tapfwd
// prints it), and the NIC gets no MSI-X vectors, as in BootVhost
// (QEMU 7.2 under TCG crashes with them), through libvirt's QEMU override
// of the interface's device (libvirt 8.2 or later), which needs the
// interface to carry the alias ua-net0.
func VhostDomainXML(name string, img Image, cmdline, iface, memory, console string) string {
	iface = strings.Replace(iface, "</interface>", "  <alias name='ua-net0'/>\n</interface>", 1)
	x := DomainXML(name, img, cmdline, iface, console)
	x = strings.Replace(x, "<domain type='qemu'>", "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>", 1)
	x = strings.Replace(x, "  <vcpu>", "  "+strings.ReplaceAll(memory, "\n", "\n  ")+"\n  <vcpu>", 1)
	return strings.Replace(x, "</domain>", `  <qemu:override>
    <qemu:device alias='ua-net0'>
      <qemu:frontend>
        <qemu:property name='vectors' type='unsigned' value='0'/>
      </qemu:frontend>
    </qemu:device>
  </qemu:override>
</domain>`, 1)
}
