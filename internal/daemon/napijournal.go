package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/base/rootdir"
	"github.com/tapfwd/tapfwd/napi"
)

// NAPIJournalDir holds a journal per NIC of the NAPI settings a running
// tapfwd changed on it (napi.Journal): written before each change, so
// that it holds the settings as they were before tapfwd touched them, and
// removed once Close has put them back. When tapfwd is killed the NIC
// keeps tapfwd's settings; the next run on that NIC puts back what the
// journal holds before it reads the NIC's settings, and so does Down.
// Each file is NETNS-IFINDEX-NIC.json, NETNS the inode of the NIC's
// network namespace.
const NAPIJournalDir = "/run/tapfwd/napi"

// ErrNAPIJournal means a NAPI journal was not restored: it is corrupt or
// not root's (and is not trusted), or the tapfwd that writes it runs.
var ErrNAPIJournal = errors.New("NAPI journal")

// napiJournalVersion is the format of the files.
const napiJournalVersion = 1

// maxNAPIJournal is the largest journal read: a NIC with thousands of
// NAPI instances stays well under it.
const maxNAPIJournal = 1 << 20

// napiJournalFile is a journal's contents: who writes it, and the steps
// that undo what it changed.
type napiJournalFile struct {
	Version int    `json:"version"`
	NIC     string `json:"nic"`
	Netns   uint64 `json:"netns"`
	PID     int    `json:"pid"`
	// Start is the writer's start time in clock ticks after boot: a
	// process that now has the pid but another start is not the writer.
	Start  uint64      `json:"start"`
	Record napi.Record `json:"record"`
}

// napiJournals are the NAPI journals in dir of the calling thread's
// network namespace, and the one this process writes.
type napiJournals struct {
	dir   string
	ns    uint64
	pid   int
	start uint64

	mu  sync.Mutex
	cur *napi.Journal // the journal of the NIC's ifindex now
}

func newNAPIJournals(dir string) (*napiJournals, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nil, fmt.Errorf("the network namespace: %w", os.NewSyscallError("stat", err))
	}
	self, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		return nil, err
	}
	return &napiJournals{dir: dir, ns: st.Ino, pid: os.Getpid(), start: self.StartTime}, nil
}

func (js *napiJournals) path(ifindex int, nic string) string {
	return filepath.Join(js.dir, fmt.Sprintf("%d-%d-%s.json", js.ns, ifindex, nic))
}

// parseJournalName is path's inverse: ok is false for a name it does not
// make.
func parseJournalName(name string) (ns uint64, ifindex int, nic string, ok bool) {
	base, ok := strings.CutSuffix(name, ".json")
	f := strings.SplitN(base, "-", 3)
	if !ok || len(f) != 3 || f[2] == "" {
		return 0, 0, "", false
	}
	ns, err1 := strconv.ParseUint(f[0], 10, 64)
	ifindex, err2 := strconv.Atoi(f[1])
	return ns, ifindex, f[2], err1 == nil && err2 == nil && ifindex > 0
}

// journal is the journal of NIC nic, ifindex, for the changes this
// process makes; the Changes on one ifindex share one.
func (js *napiJournals) journal(ifindex int, nic string) *napi.Journal {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.cur == nil || js.cur.Record().Ifindex != ifindex {
		js.cur = napi.NewJournal(ifindex, func(r napi.Record) error { return js.save(nic, r) })
	}
	return js.cur
}

// save writes r atomically (a file beside it, renamed over it), or
// removes the file when r has no steps left.
func (js *napiJournals) save(nic string, r napi.Record) error {
	p := js.path(r.Ifindex, nic)
	if len(r.Steps) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	for _, d := range []string{filepath.Dir(js.dir), js.dir} {
		if err := rootdir.Ensure(d); err != nil {
			return err
		}
	}
	b, err := json.Marshal(napiJournalFile{Version: napiJournalVersion, NIC: nic, Netns: js.ns, PID: js.pid, Start: js.start, Record: r})
	if err != nil {
		return err
	}
	tmp := filepath.Join(js.dir, "."+filepath.Base(p)+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}

// read reads the journal at path, named for NIC nic, ifindex, and checks
// it: a root-owned regular file only root may write, of this format, that
// says what its name says, with a Record napi.Record.Check takes.
func (js *napiJournals) read(path string, ifindex int, nic string) (napiJournalFile, error) {
	var j napiJournalFile
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return j, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return j, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		return j, fmt.Errorf("not a regular file of root's that only root may write (mode %#o, uid %d)", st.Mode, st.Uid)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxNAPIJournal+1))
	if err != nil {
		return j, err
	}
	if len(b) > maxNAPIJournal {
		return j, fmt.Errorf("over %d bytes", maxNAPIJournal)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return j, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return j, errors.New("data after the journal")
	}
	switch {
	case j.Version != napiJournalVersion:
		return j, fmt.Errorf("version %d, want %d", j.Version, napiJournalVersion)
	case j.NIC != nic || j.Netns != js.ns || j.Record.Ifindex != ifindex:
		return j, fmt.Errorf("it names NIC %q, ifindex %d in namespace %d, unlike its file name", j.NIC, j.Record.Ifindex, j.Netns)
	case j.PID <= 0 || j.Start == 0:
		return j, fmt.Errorf("writer pid %d started at %d", j.PID, j.Start)
	}
	return j, j.Record.Check()
}

// NAPIRecovery is what became of a NAPI journal a tapfwd that no longer
// runs left: restored, or discarded with the reason.
type NAPIRecovery struct {
	NIC       string
	PID       int         // the tapfwd that wrote it
	Restored  []napi.Step // what was put back, newest change first
	Discarded string      // why nothing was put back; "" when restored
}

func (r NAPIRecovery) String() string {
	if r.Discarded != "" {
		return fmt.Sprintf("NIC %s: discarded the NAPI journal tapfwd pid %d left: %s", r.NIC, r.PID, r.Discarded)
	}
	return fmt.Sprintf("NIC %s: put back the NAPI settings tapfwd pid %d changed and left when it was killed: %s", r.NIC, r.PID, r.steps())
}

// steps says what was put back.
func (r NAPIRecovery) steps() string {
	var steps []string
	for _, s := range r.Restored {
		steps = append(steps, s.String())
	}
	return strings.Join(steps, "; ")
}

// recover restores, or discards, the journals of this namespace whose
// writer no longer runs: of NIC nic only (a journal of nic whose writer
// runs is then an error), or of every NIC when nic is "" (those whose
// writer runs are left). A journal whose NIC is gone, was made again
// (another ifindex) or lost the NAPI instances it names (napi.ErrStale)
// is discarded: its settings went with them. A journal that cannot be
// read or checked, or not restored, stays, and the error says so.
func (js *napiJournals) recover(nic string, restore func(napi.Record) ([]napi.Step, error)) ([]NAPIRecovery, error) {
	ents, err := os.ReadDir(js.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		err = rootdir.Check(js.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNAPIJournal, err)
	}
	var out []NAPIRecovery
	var errs []error
	for _, e := range ents {
		ns, ifindex, name, ok := parseJournalName(e.Name())
		if !ok || ns != js.ns || nic != "" && name != nic {
			continue
		}
		r, err := js.recoverOne(filepath.Join(js.dir, e.Name()), ifindex, name, nic != "", restore)
		if r != nil {
			out = append(out, *r)
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// recoverOne is recover of the journal at path.
func (js *napiJournals) recoverOne(path string, ifindex int, nic string, mine bool, restore func(napi.Record) ([]napi.Step, error)) (*NAPIRecovery, error) {
	j, err := js.read(path, ifindex, nic)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // its writer removed it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s is not trusted: %v (remove it to go on; what NIC %s had before that tapfwd changed it is then unknown)", ErrNAPIJournal, path, err, nic)
	}
	if st, err := procfs.ReadStat(j.PID); err == nil && st.StartTime == j.Start {
		if mine {
			return nil, fmt.Errorf("%w %s: tapfwd pid %d is changing the NAPI settings of NIC %s", ErrNAPIJournal, path, j.PID, nic)
		}
		return nil, nil
	}
	r := &NAPIRecovery{NIC: nic, PID: j.PID}
	ifi, err := net.InterfaceByName(nic)
	switch {
	case err != nil:
		r.Discarded = "the NIC is gone, with its settings"
	case ifi.Index != ifindex:
		r.Discarded = fmt.Sprintf("the NIC was made again (ifindex %d, was %d): its settings went with the old one", ifi.Index, ifindex)
	default:
		r.Restored, err = restore(j.Record)
		if errors.Is(err, napi.ErrStale) {
			r.Restored, r.Discarded = nil, fmt.Sprintf("%v: their settings went with them", err)
		} else if err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrNAPIJournal, path, err)
		}
	}
	return r, os.Remove(path)
}

// restoreNAPIRecord restores r on this namespace's devices.
func restoreNAPIRecord(r napi.Record) ([]napi.Step, error) {
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return r.Restore(c)
}

// recoverNAPI puts back the NIC's NAPI settings a tapfwd that was killed
// left (NAPIJournalDir), before anything reads them, and logs once what it
// did.
func (d *Daemon) recoverNAPI() error {
	var err error
	if d.napiJ, err = newNAPIJournals(NAPIJournalDir); err != nil {
		return err
	}
	got, err := d.napiJ.recover(d.c.NIC.Name, restoreNAPIRecord)
	for _, r := range got {
		if r.Discarded != "" {
			d.log.Warn("discarded the NAPI journal a killed tapfwd left", "nic", r.NIC, "pid", r.PID, "reason", r.Discarded)
		} else {
			d.log.Info("put back the NIC's NAPI settings a killed tapfwd left", "nic", r.NIC, "pid", r.PID, "restored", r.steps())
		}
	}
	return err
}

// nicJournal is the NAPI journal of the NIC ifindex; nil before
// recoverNAPI.
func (d *Daemon) nicJournal(ifindex int) *napi.Journal {
	if d.napiJ == nil {
		return nil
	}
	return d.napiJ.journal(ifindex, d.c.NIC.Name)
}
