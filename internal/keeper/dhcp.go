package keeper

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/tapfwd/tapfwd/internal/dhcp"
)

// DHCP is a running DHCP keeper: it runs dnsmasq, and stops it and
// removes its lease file (unless the configuration keeps it) when tapfwd
// ends.
type DHCP struct {
	*Keeper
	Pid int // dnsmasq's
}

// StartDHCP starts the DHCP keeper for c and waits until dnsmasq runs.
// dnsmasq's log goes to log, line by line. A keeper that ends before it
// is stopped (dnsmasq died) is logged as a warning.
func StartDHCP(c dhcp.Config, log *slog.Logger) (*DHCP, error) {
	k, err := start("DHCP keeper", DHCPCommand, c, log, "dnsmasq")
	if err != nil {
		return nil, err
	}
	d := &DHCP{Keeper: k}
	d.Pid, _ = strconv.Atoi(k.detail)
	go func() {
		<-k.exited
		if !k.stopping.Load() {
			log.Warn("the DHCP server stopped: guests get no new leases")
		}
	}()
	return d, nil
}

// ServeDHCP is the DHCP keeper's side: `tapfwd dhcp-keeper`. dnsmasq's
// log goes to stderr.
func ServeDHCP(stdin io.Reader, stdout, stderr io.Writer) error {
	return serve("dhcp-keeper", &dhcpJob{}, stdin, stdout, stderr)
}

type dhcpJob struct {
	dhcp.Config
	srv *dhcp.Server
}

func (j *dhcpJob) begin(stderr io.Writer) (string, error) {
	s, err := dhcp.Start(j.Config, func(line string) { fmt.Fprintln(stderr, line) })
	if err != nil {
		return "", err
	}
	j.srv = s
	return strconv.Itoa(s.Pid()), nil
}

func (j *dhcpJob) done() <-chan struct{} { return j.srv.Done() }

func (j *dhcpJob) end(stderr io.Writer) error {
	select {
	case <-j.srv.Done():
		fmt.Fprintf(stderr, "dnsmasq exited: %v\n", j.srv.Err())
	default:
	}
	return j.srv.Stop()
}
