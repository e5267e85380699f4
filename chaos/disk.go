package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The disk nemesis fills one node's disk. Each node then runs on a
// filesystem of its own: an ext4 image of DiskImageSize, sparse on the
// machine's disk, mounted through a loop device, so filling it fills
// nothing else. It needs root, mkfs.ext4 and loop devices, which is why
// `--nemesis all` leaves it out.
const (
	// DiskImageSize is each node's filesystem with the disk nemesis.
	DiskImageSize = 1 << 30
	// DiskMinFree is the nodes' --min-free-disk with the disk nemesis:
	// under it the leader refuses writes 507 and a follower takes no
	// client entries; under an eighth of it the ballast (a quarter of
	// it) goes; with no ballast left and less than an eighth the node
	// stops applying until space returns (docs/DISK.md).
	DiskMinFree = 128 << 20
	// fillerName is the file that fills a node's filesystem, beside (not
	// in) its data dir.
	fillerName = "chaos-filler"
)

// OptInKinds are nemesis kinds `--nemesis all` leaves out: each must be
// named.
var OptInKinds = []string{"disk"}

// AllKinds is every nemesis kind: NemesisKinds, then OptInKinds.
func AllKinds() []string { return append(slices.Clone(NemesisKinds), OptInKinds...) }

// Disks are the nodes' own filesystems (the disk nemesis).
type Disks struct {
	mounts map[string]string // node id → mount point
	images []string
}

// diskUnusable says why this machine cannot run the disk nemesis, "" when
// it can.
func diskUnusable() string {
	if os.Geteuid() != 0 {
		return "it needs root (it mounts a filesystem of its own for each node)"
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "it needs " + tool + " (Debian's e2fsprogs and mount)"
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "it needs loop devices (/dev/loop-control: " + err.Error() + ")"
	}
	return ""
}

// SetupDisks makes and mounts a filesystem for each node under dir and
// moves its data dir onto it (nodes not started yet).
func SetupDisks(nodes []*Node, dir string) (*Disks, error) {
	d := &Disks{mounts: map[string]string{}}
	for _, n := range nodes {
		img := filepath.Join(dir, n.ID+".ext4")
		mnt := filepath.Join(dir, n.ID+"-disk")
		if err := makeImage(img); err != nil {
			d.Teardown(false)
			return nil, err
		}
		d.images = append(d.images, img)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			d.Teardown(false)
			return nil, err
		}
		if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
			d.Teardown(false)
			return nil, fmt.Errorf("mount -o loop %s %s: %w: %s", img, mnt, err, strings.TrimSpace(string(out)))
		}
		d.mounts[n.ID] = mnt
		n.DataDir = filepath.Join(mnt, "data")
	}
	return d, nil
}

// makeImage writes an empty ext4 filesystem of DiskImageSize into path, a
// sparse file. No blocks are reserved for root (-m 0): the nodes run as
// root, and what they see free is then what the nemesis leaves.
func makeImage(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = errors.Join(f.Truncate(DiskImageSize), f.Close())
	if err != nil {
		return err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", path).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Teardown unmounts every node's filesystem and removes its mount point;
// the images are kept when keep is set (they hold the data dirs: mount -o
// loop one to read it), else removed. The nodes must be stopped.
func (d *Disks) Teardown(keep bool) error {
	if d == nil {
		return nil
	}
	var errs []error
	for id, mnt := range d.mounts {
		var err error
		for try := 0; try < 20; try++ { // a process just killed may hold it a moment
			var out []byte
			if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
				break
			} else {
				err = fmt.Errorf("umount %s: %w: %s", mnt, err, strings.TrimSpace(string(out)))
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(mnt)
		delete(d.mounts, id)
	}
	if !keep && len(errs) == 0 {
		for _, img := range d.images {
			os.Remove(img)
		}
		d.images = nil
	}
	return errors.Join(errs...)
}

// free is what the node's filesystem has free, as the node reads it.
func (d *Disks) free(n *Node) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.mounts[n.ID], &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// fill grows the node's filler until its filesystem has at most leave
// bytes free (none: until it refuses more), and returns what is free.
func (d *Disks) fill(n *Node, leave uint64) (uint64, error) {
	f, err := os.OpenFile(filepath.Join(d.mounts[n.ID], fillerName), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for try := 0; try < 8; try++ {
		free, err := d.free(n)
		if err != nil || free <= leave {
			return free, err
		}
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if err := syscall.Fallocate(int(f.Fd()), 0, st.Size(), int64(free-leave)); err != nil && !errors.Is(err, syscall.ENOSPC) {
			return free, err
		}
		if leave == 0 {
			// fallocate stops short of the last blocks ext4 keeps for its
			// own metadata; writes at the end take what is left.
			if _, err := f.Seek(0, io.SeekEnd); err != nil {
				return free, err
			}
			buf := make([]byte, 64<<10)
			for {
				if _, err := f.Write(buf); err != nil {
					break
				}
			}
		}
	}
	return d.free(n)
}

// drain removes the node's filler.
func (d *Disks) drain(n *Node) error {
	err := os.Remove(filepath.Join(d.mounts[n.ID], fillerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Disk nemesis levels: how full it leaves a node's disk.
var diskLevels = []struct {
	name  string
	leave uint64
}{
	// Under --min-free-disk: writes 507 on a leader, a follower takes
	// only raft's own entries.
	{"under --min-free-disk", DiskMinFree / 2},
	// Under an eighth of it, twice (the node gives its ballast back the
	// first time): no ballast, and the node stops applying.
	{"under an eighth of --min-free-disk, ballast gone", DiskMinFree / 16},
	// Nothing at all: every write the node makes fails (ENOSPC).
	{"no byte free", 0},
}

// diskNemesis fills a node's disk (the leader half the time) to one of
// diskLevels for 3-8 s, sometimes kill -9s and restarts it while full,
// then frees the space and waits for the node to be ready.
func diskNemesis(ctx context.Context, e *env) (string, error) {
	if e.disks == nil {
		return "disk: the nodes have no filesystems of their own", errors.New("disk nemesis without SetupDisks")
	}
	n, role, err := victim(ctx, e)
	if err != nil {
		return "disk: no target", err
	}
	lv := pick(e.rnd, diskLevels)
	defer e.disks.drain(n) // also when the run is interrupted
	free, err := e.disks.fill(n, lv.leave)
	if err == nil && lv.leave < DiskMinFree/8 {
		// The node reads its free space once a second and then gives
		// its ballast back: fill again what that freed.
		sleep(ctx, 1500*time.Millisecond)
		free, err = e.disks.fill(n, lv.leave)
	}
	detail := fmt.Sprintf("filled %s%s's disk: %s (%d KiB free)", n.ID, role, lv.name, free>>10)
	if err != nil {
		return detail, err
	}
	hold := 3*time.Second + time.Duration(e.rnd.IntN(5000))*time.Millisecond
	if e.rnd.IntN(3) == 0 {
		sleep(ctx, hold/2)
		e.cl.Kill(n)
		detail += "; kill -9 and restart on the full disk"
		if err := e.cl.Start(n); err != nil {
			return detail, err
		}
		sleep(ctx, hold/2)
	} else {
		sleep(ctx, hold)
	}
	if err := e.disks.drain(n); err != nil {
		return detail, err
	}
	detail += fmt.Sprintf(", freed after %s", hold.Round(100*time.Millisecond))
	if !n.Running() {
		// As a service manager would: a node that stopped on its full
		// disk is started once there is room. Said in the detail: a
		// node should wait for room, not exit.
		detail += "; it had exited on the full disk (" + n.exitTail() + "), started again"
		if err := e.cl.Start(n); err != nil {
			return detail, err
		}
	}
	e.healed()
	return detail, e.cl.WaitReady(ctx, []*Node{n}, e.bound)
}
