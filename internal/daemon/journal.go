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

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/base/rootdir"
)

// journalDir is a directory of journals of what a running tapfwd changed
// on a NIC and must put back (NAPIJournalDir, FeatureJournalDir), a file
// per NIC of the calling thread's network namespace, NETNS-IFINDEX-NIC.json
// (NETNS the inode of the namespace): written before each change, removed
// once the change is undone, so that the next run on the NIC, or Down,
// finds what a killed one left.
type journalDir struct {
	dir   string
	ns    uint64
	pid   int
	start uint64
}

// maxJournal is the largest journal read: a NIC with thousands of NAPI
// instances stays well under it.
const maxJournal = 1 << 20

func newJournalDir(dir string) (journalDir, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return journalDir{}, fmt.Errorf("the network namespace: %w", os.NewSyscallError("stat", err))
	}
	self, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		return journalDir{}, err
	}
	return journalDir{dir: dir, ns: st.Ino, pid: os.Getpid(), start: self.StartTime}, nil
}

// journalHead is what every journal says of itself and its writer.
type journalHead struct {
	Version int    `json:"version"`
	NIC     string `json:"nic"`
	Netns   uint64 `json:"netns"`
	PID     int    `json:"pid"`
	// Start is the writer's start time in clock ticks after boot: a
	// process that now has the pid but another start is not the writer.
	Start uint64 `json:"start"`
}

// head is the head of a journal this process writes of NIC nic.
func (d journalDir) head(nic string, version int) journalHead {
	return journalHead{Version: version, NIC: nic, Netns: d.ns, PID: d.pid, Start: d.start}
}

// check refuses a head that says other than the file's name (NIC nic,
// ifindex, this namespace; ifindex is also what the journal's body names,
// got), or another version than version.
func (h journalHead) check(d journalDir, version int, nic string, ifindex, got int) error {
	switch {
	case h.Version != version:
		return fmt.Errorf("version %d, want %d", h.Version, version)
	case h.NIC != nic || h.Netns != d.ns || got != ifindex:
		return fmt.Errorf("it names NIC %q, ifindex %d in namespace %d, unlike its file name", h.NIC, got, h.Netns)
	case h.PID <= 0 || h.Start == 0:
		return fmt.Errorf("writer pid %d started at %d", h.PID, h.Start)
	}
	return nil
}

// head is the journal's head, for recoverJournals.
func (h journalHead) head() journalHead { return h }

// writerRuns reports whether the tapfwd that wrote the journal runs.
func (h journalHead) writerRuns() bool {
	st, err := procfs.ReadStat(h.PID)
	return err == nil && st.StartTime == h.Start
}

func (d journalDir) path(ifindex int, nic string) string {
	return filepath.Join(d.dir, fmt.Sprintf("%d-%d-%s.json", d.ns, ifindex, nic))
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

// write writes v as JSON to the journal at p atomically (a file beside
// it, renamed over it), making the directory when missing.
func (d journalDir) write(p string, v any) error {
	for _, dir := range []string{filepath.Dir(d.dir), d.dir} {
		if err := rootdir.Ensure(dir); err != nil {
			return err
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.dir, "."+filepath.Base(p)+".tmp")
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

// remove removes the journal at p; one already gone is no error.
func (d journalDir) remove(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// read reads the journal at path into v: a root-owned regular file only
// root may write, one JSON object with no field v lacks.
func (d journalDir) read(path string, v any) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("not a regular file of root's that only root may write (mode %#o, uid %d)", st.Mode, st.Uid)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxJournal+1))
	if err != nil {
		return err
	}
	if len(b) > maxJournal {
		return fmt.Errorf("over %d bytes", maxJournal)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the journal")
	}
	return nil
}

// journalEntry is a journal's file in a journalDir.
type journalEntry struct {
	path    string
	ifindex int
	nic     string
}

// entries are the journals of this namespace in d: of NIC nic only, or of
// every NIC when nic is "". A missing directory has none.
func (d journalDir) entries(nic string) ([]journalEntry, error) {
	ents, err := os.ReadDir(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		err = rootdir.Check(d.dir)
	}
	if err != nil {
		return nil, err
	}
	var out []journalEntry
	for _, e := range ents {
		ns, ifindex, name, ok := parseJournalName(e.Name())
		if ok && ns == d.ns && (nic == "" || name == nic) {
			out = append(out, journalEntry{filepath.Join(d.dir, e.Name()), ifindex, name})
		}
	}
	return out, nil
}

// nicChanged says why what a journal of NIC nic, ifindex, would put back
// went with the NIC: it is gone, or was made again (another ifindex); ""
// when the NIC is still the one.
func nicChanged(nic string, ifindex int) string {
	ifi, err := net.InterfaceByName(nic)
	switch {
	case err != nil:
		return "the NIC is gone, with its settings"
	case ifi.Index != ifindex:
		return fmt.Sprintf("the NIC was made again (ifindex %d, was %d): its settings went with the old one", ifi.Index, ifindex)
	}
	return ""
}

// JournalRecovery is what became of a journal a tapfwd that no longer
// runs left: restored, or discarded with the reason.
type JournalRecovery struct {
	NIC       string
	PID       int    // the tapfwd that wrote it
	Discarded string // why nothing was put back; "" when restored
}

// recovery is the JournalRecovery of a journal of NIC nic, ifindex, that
// tapfwd pid left: discarded when the NIC changed (nicChanged).
func recovery(nic string, ifindex, pid int) JournalRecovery {
	return JournalRecovery{NIC: nic, PID: pid, Discarded: nicChanged(nic, ifindex)}
}

// text is r's line for `tapfwd down`: journal names the journal ("NAPI
// journal"), what what it puts back ("NAPI settings"), and restored what
// was.
func (r JournalRecovery) text(journal, what, restored string) string {
	if r.Discarded != "" {
		return fmt.Sprintf("NIC %s: discarded the %s tapfwd pid %d left: %s", r.NIC, journal, r.PID, r.Discarded)
	}
	return fmt.Sprintf("NIC %s: put back the %s tapfwd pid %d changed and left when it was killed: %s", r.NIC, what, r.PID, restored)
}

// logRecovery logs r once, in the words of text.
func (d *Daemon) logRecovery(r JournalRecovery, journal, what, restored string) {
	if r.Discarded != "" {
		d.log.Warn("discarded the "+journal+" a killed tapfwd left", "nic", r.NIC, "pid", r.PID, "reason", r.Discarded)
		return
	}
	d.log.Info("put back the NIC's "+what+" a killed tapfwd left", "nic", r.NIC, "pid", r.PID, "restored", restored)
}

// recoverJournals is the recover of both kinds of journal in d: each
// journal of NIC nic (of every NIC when nic is "") is read and checked
// (read); one whose writer runs is left, and is an error when nic names
// it; restore is given the others, with the JournalRecovery that says
// whether the NIC is still the one, and says what became of each. A
// journal goes once restore has said, and stays when it could not be
// read or restore failed. kind is the journal's error, what what its
// writer changes ("NAPI settings").
func recoverJournals[J interface{ head() journalHead }, R any](d journalDir, nic string, kind error, what string,
	read func(path string, ifindex int, nic string) (J, error), restore func(J, JournalRecovery) (R, error)) ([]R, error) {
	ents, err := d.entries(nic)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kind, err)
	}
	var out []R
	var errs []error
	for _, e := range ents {
		j, err := read(e.path, e.ifindex, e.nic)
		h := j.head()
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // its writer removed it meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("%w %s is not trusted: %v (remove it to go on; what NIC %s had before that tapfwd changed it is then unknown)", kind, e.path, err, e.nic))
			continue
		case h.writerRuns() && nic != "":
			errs = append(errs, fmt.Errorf("%w %s: tapfwd pid %d is changing the %s of NIC %s", kind, e.path, h.PID, what, e.nic))
			continue
		case h.writerRuns():
			continue
		}
		r, err := restore(j, recovery(e.nic, e.ifindex, h.PID))
		if err != nil {
			errs = append(errs, fmt.Errorf("%w %s: %v", kind, e.path, err))
			continue
		}
		out = append(out, r)
		errs = append(errs, os.Remove(e.path))
	}
	return out, errors.Join(errs...)
}

// recoverNIC puts back what a tapfwd that was killed left changed on the
// NIC, before anything reads it: its NAPI settings (NAPIJournalDir), then
// its features (FeatureJournalDir); it logs once what it did.
func (d *Daemon) recoverNIC() error {
	var err error
	if d.napiJ, err = newNAPIJournals(NAPIJournalDir); err != nil {
		return err
	}
	if d.featJ, err = newFeatureJournals(FeatureJournalDir); err != nil {
		return err
	}
	napis, err := d.napiJ.recover(d.c.NIC.Name, restoreNAPIRecord)
	for _, r := range napis {
		d.logRecovery(r.JournalRecovery, "NAPI journal", "NAPI settings", r.steps())
	}
	if err != nil {
		return err
	}
	features, err := d.featJ.recover(d.c.NIC.Name, restoreFeatures)
	for _, r := range features {
		d.logRecovery(r.JournalRecovery, "feature journal", "features", r.Restored.String())
	}
	return err
}
