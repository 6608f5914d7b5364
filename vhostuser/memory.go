package vhostuser

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// region is one mapped region of the guest's memory.
type region struct {
	gpa, uaddr, size uint64
	// mem holds the region: mem[i] is guest physical address gpa+i and
	// front-end user address uaddr+i.
	mem []byte
	// mapping is what mmap returned (it may start before mem); nil for
	// memory the port did not map (tests).
	mapping []byte
	// dev, ino and off name the file mem[0] is at and its offset there:
	// two regions may map one file range (ringsOverlap).
	dev, ino, off uint64
}

// memTable is the guest memory the front-end shared: at most maxRegions
// regions that overlap neither in guest physical nor in user addresses.
type memTable struct {
	regions [maxRegions]region
	n       int
}

// gpa returns the host bytes of guest physical range [addr, addr+n) up to
// the end of the region holding addr: a piece shorter than n means the
// range goes on in another region. It returns nil if addr is not guest
// memory.
func (m *memTable) gpa(addr, n uint64) []byte {
	for i := range m.n {
		r := &m.regions[i]
		if addr-r.gpa < r.size { // wraps to a huge value when addr < r.gpa
			off := addr - r.gpa
			return r.mem[off : off+min(n, r.size-off)]
		}
	}
	return nil
}

// gpaWhole returns the host bytes of guest physical range [addr, addr+n)
// if it lies in one region, else nil.
func (m *memTable) gpaWhole(addr, n uint64) []byte {
	if b := m.gpa(addr, n); uint64(len(b)) == n && n > 0 {
		return b
	}
	return nil
}

// uva returns the host bytes of front-end user address range [addr,
// addr+n) if it lies in one region, else nil. Ring addresses come as user
// addresses (QEMU's virtual addresses) without VIRTIO_F_IOMMU_PLATFORM.
func (m *memTable) uva(addr, n uint64) []byte {
	for i := range m.n {
		r := &m.regions[i]
		if off := addr - r.uaddr; off < r.size && n <= r.size-off && n > 0 {
			return r.mem[off : off+n]
		}
	}
	return nil
}

// unmap releases every mapping and empties the table.
func (m *memTable) unmap() {
	for i := range m.n {
		if m.regions[i].mapping != nil {
			_ = unix.Munmap(m.regions[i].mapping)
		}
		m.regions[i] = region{}
	}
	m.n = 0
}

// mapTable maps the regions of a SET_MEM_TABLE, region i from fds[i]. It
// closes every fd: a mapping keeps its file alive. On error nothing stays
// mapped.
func mapTable(descs []regionDesc, fds []int) (memTable, error) {
	var t memTable
	defer closeFds(fds)
	for i, d := range descs {
		r, err := mapRegion(d, fds[i])
		if err != nil {
			t.unmap()
			return memTable{}, fmt.Errorf("%w: SET_MEM_TABLE: region %d: %w", ErrProtocol, i, err)
		}
		t.regions[i] = r
		t.n++
	}
	return t, nil
}

// mapRegion maps one region read/write and shared. The file must be a
// regular file at least mmap_offset+size long (touching a shared mapping
// past the end of its file raises SIGBUS) on a file system held in memory
// (memfd and /dev/shm are tmpfs, or hugetlbfs): a page fault on any other
// can wait on a disk, a network or a FUSE daemon, and the data path
// touches guest memory holding locks. The mapping starts at mmap_offset
// rounded down to the file's block size (hugetlbfs needs huge-page-aligned
// offsets; st_blksize is the huge page size there).
func mapRegion(d regionDesc, fd int) (region, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return region{}, os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return region{}, fmt.Errorf("fd is not a regular file (mode %#o)", st.Mode)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return region{}, os.NewSyscallError("fstatfs", err)
	}
	if fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.HUGETLBFS_MAGIC {
		return region{}, fmt.Errorf("the file is on %s: guest memory must be memfd, tmpfs (/dev/shm) or hugetlbfs, "+
			"where a page fault waits on no disk or network", fsName(fs.Type))
	}
	end := d.mmapOffset + d.size
	if st.Size < 0 || uint64(st.Size) < end {
		return region{}, fmt.Errorf("file has %d bytes, the region ends at %d", st.Size, end)
	}
	align := uint64(os.Getpagesize())
	if bs := uint64(st.Blksize); bs > align && bs&(bs-1) == 0 {
		align = bs
	}
	start := d.mmapOffset &^ (align - 1)
	length := end - start
	if length > uint64(^uint(0)>>1) || start > 1<<62 {
		return region{}, fmt.Errorf("region of %d bytes at offset %d cannot be mapped", d.size, d.mmapOffset)
	}
	b, err := unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return region{}, os.NewSyscallError("mmap", err)
	}
	off := d.mmapOffset - start
	return region{gpa: d.gpa, uaddr: d.uaddr, size: d.size, mem: b[off : off+d.size : off+d.size], mapping: b,
		dev: uint64(st.Dev), ino: st.Ino, off: d.mmapOffset}, nil
}

// fsName names the file systems guest memory might be found on by mistake.
func fsName(magic int64) string {
	switch magic {
	case unix.FUSE_SUPER_MAGIC:
		return "a FUSE file system"
	case unix.NFS_SUPER_MAGIC:
		return "NFS"
	case unix.CIFS_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC:
		return "SMB"
	case unix.V9FS_MAGIC:
		return "9p"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "XFS"
	case unix.BTRFS_SUPER_MAGIC:
		return "Btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("a file system of type %#x", magic)
}

func closeFds(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}
