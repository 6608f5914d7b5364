package macvtap

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/vm"
)

// TestStatusListsAddedPorts: tapfwd status lists every VM port on the
// TAP, the one run --vm-ports made and one `tapfwd vm-port add` added
// while tapfwd ran, the latter marked as added; /status's JSON says how
// each came. tapfwd runs as nobody: the ports are listed after the
// privilege drop.
func TestStatusListsAddedPorts(t *testing.T) {
	testkit.NeedRoot(t)
	exe := testkit.PlainTapfwd(t)
	bed, _ := testkit.Start(t, exe, "--user", "nobody", "--vm-ports", "1")
	made := vm.Ports(t, bed.LabNS, bed.LabIf, 1)[0]
	added := vm.AddPort(t, exe, bed.LabNS, bed.LabIf, "--name", "tfwvmadd")
	out := testkit.BedRun(t, bed, bed.FwdNS, exe, "status")
	for _, want := range []string{
		"\nVM ports:\n",
		"  " + made.Name + "  " + made.MAC + "  " + made.Dev + "\n",
		"  tfwvmadd  " + added.MAC + "  " + added.Dev + "  added after the start\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tapfwd status lacks %q:\n%s", want, out)
		}
	}
	var st struct {
		VMPorts []struct {
			Name, MAC, Dev, Type, Origin string
		} `json:"vm_ports"`
		VMPortsError string `json:"vm_ports_error"`
	}
	raw := testkit.BedRun(t, bed, bed.FwdNS, exe, "status", "--json")
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("tapfwd status --json: %v\n%s", err, raw)
	}
	origins := map[string]string{}
	for _, p := range st.VMPorts {
		origins[p.Name] = p.Type + " " + p.Origin
	}
	if len(st.VMPorts) != 2 || origins[made.Name] != "macvtap run" || origins["tfwvmadd"] != "macvtap added" || st.VMPortsError != "" {
		t.Errorf("/status's vm_ports %+v (error %q), want %s made by the run and tfwvmadd added", st.VMPorts, st.VMPortsError, made.Name)
	}
}
