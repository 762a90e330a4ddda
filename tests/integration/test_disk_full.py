# SPDX-License-Identifier: MIT
"""A full state directory.

ext4 on a 64 MiB loop image (O_DIRECT works there): a committed checkpoint
first; then a save bigger than the free space, a save whose shards each fit
but not together, and a save into a disk some other file filled.  Each gets
ENOSPC with a message that says so, at shard creation (the daemon
preallocates), and changes nothing: the earlier checkpoint restores
bit-exact, no tmp dir or preallocated space is left behind, and the daemon
keeps serving — a new save and commit work once there is room.

Then a size-limited tmpfs (which may or may not take O_DIRECT, depending on
the kernel) and a ramfs (which never does): the daemon falls back to the
page cache with a warning where O_DIRECT is refused, and saves and restores
correctly either way.  Everything is unmounted in a finally."""
import errno
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Daemon, SkipTest, TestFailure, check, log, run_test, shards_arg  # noqa: E402

MiB = 1 << 20
O_DIRECT_WARNING = "does not support O_DIRECT"


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)


class Mount:
    """A filesystem mounted for the test; umount() is safe to call twice."""

    def __init__(self, target, fstype, source, options):
        self.target = target
        os.makedirs(target, exist_ok=True)
        p = run("mount", "-t", fstype, "-o", options, source, target)
        if p.returncode != 0:
            raise SkipTest("cannot mount %s (%s): %s" % (fstype, options, p.stderr.strip()))
        self.mounted = True

    def umount(self):
        if not self.mounted:
            return
        p = run("umount", self.target)
        if p.returncode != 0:
            run("umount", "-l", self.target)
        self.mounted = False


def mount_ext4(tmp, size):
    if os.geteuid() != 0:
        raise SkipTest("mounting a loop image needs root")
    for tool in ("mkfs.ext4", "mount", "umount"):
        if not shutil.which(tool):
            raise SkipTest("%s is not installed" % tool)
    image = os.path.join(tmp, "disk.img")
    with open(image, "wb") as f:
        f.truncate(size)
    # -m 0: no blocks reserved for root, so "free" means the same to the
    # daemon (root) as to statvfs
    p = run("mkfs.ext4", "-q", "-F", "-m", "0", image)
    if p.returncode != 0:
        raise SkipTest("mkfs.ext4 failed: %s" % p.stderr.strip())
    return Mount(os.path.join(tmp, "ext4"), "ext4", image, "loop")


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def odirect_supported(directory):
    probe = os.path.join(directory, ".odirect-probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        os.close(fd)
        return True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


def expect_enospc(p, what, shard=None):
    check(p.returncode != 0, "%s: succeeded on a full disk" % what)
    errs = [l for l in p.stderr.splitlines() if l.startswith("ERROR ")]
    check(errs and errs[0].startswith("ERROR ENOSPC -28:"),
          "%s: expected ERROR ENOSPC, got rc=%d %r" % (what, p.returncode, p.stderr[-800:]))
    msg = errs[0]
    check("no space left for shard" in msg,
          "%s: message does not say the disk is full at shard creation: %r" % (what, msg))
    if shard:
        check("'%s'" % shard in msg, "%s: message does not name shard %s: %r" % (what, shard, msg))
    return msg


def tmp_dirs(state_dir):
    out = []
    for root, dirs, _ in os.walk(os.path.join(state_dir, "jobs")):
        out += [os.path.join(root, x) for x in dirs
                if x.startswith(".rank-") and x.endswith(".tmp")]
    return out


def wait_clean(d, free_before, what, slack=2 * MiB, timeout=10):
    """Failed saves leave no tmp dir, no trash and give their space back."""
    deadline = time.monotonic() + timeout
    while True:
        left = tmp_dirs(d.state_dir)
        trash = os.listdir(os.path.join(d.state_dir, "trash"))
        free = free_bytes(d.state_dir)
        if not left and not trash and free >= free_before - slack:
            return
        if time.monotonic() > deadline:
            raise TestFailure("%s: after %ds tmp dirs %s, trash %s, free %d (was %d)"
                              % (what, timeout, left, trash, free, free_before))
        time.sleep(0.1)


def saves_and_restores(d, job, step, spec, zero_copy=False):
    args = ["save", "--job", job, "--step", step, "--shards", shards_arg(spec), "--commit"]
    d.rank(*(args + (["--zero-copy"] if zero_copy else [])))
    d.rank("verify", "--job", job, "--step", step, "--shards", shards_arg(spec), "--map")
    out = d.rank("latest", "--job", job).stdout.split()
    check(out == [str(step), "1"], "%s: latest is %s, want %d" % (job, out, step))


def ext4_full(tmp):
    m = mount_ext4(tmp, 64 * MiB)
    d = None
    try:
        state = os.path.join(m.target, "state")
        d = Daemon(tmp, name="ext4", state_dir=state, pool="64M", slot="4M").start()
        check(odirect_supported(state), "ext4 refuses O_DIRECT")

        job = "full-job"
        first = [("model", 2 * MiB + 333), ("optim", 777777), ("empty", 0)]
        saves_and_restores(d, job, 1, first)
        time.sleep(0.2)
        free0 = free_bytes(state)
        log("ext4: %d MiB free after the first checkpoint" % (free0 // MiB))

        # one shard bigger than all the free space
        huge = free0 + 8 * MiB
        p = d.rank("save", "--job", job, "--step", 2, "--shards", "huge:%d" % huge,
                   check_rc=False)
        expect_enospc(p, "one shard > free space", shard="huge")
        wait_clean(d, free0, "after the huge shard")

        # shards that each fit, but not together: fails at a later shard,
        # and the preallocated earlier ones are given back
        each = free0 * 3 // 10
        spec = [("part%d" % i, each) for i in range(5)]
        p = d.rank("save", "--job", job, "--step", 2, "--shards", shards_arg(spec),
                   check_rc=False)
        msg = expect_enospc(p, "5 shards of 30% of the free space")
        check(any("'part%d'" % i in msg for i in (3, 4)),
              "ENOSPC should hit part3 (after 90%% is allocated): %r" % msg)
        wait_clean(d, free0, "after the multi-shard save")
        # the same, zero-copy
        p = d.rank("save", "--job", job, "--step", 2, "--shards", shards_arg(spec), "--zero-copy",
                   check_rc=False)
        msg = expect_enospc(p, "5 shards, zero-copy")
        # zero-copy calls name the step that failed: the shard's creation,
        # before any of its bytes were staged
        check("shard_begin:" in msg, "zero-copy ENOSPC not at shard creation: %r" % msg)
        wait_clean(d, free0, "after the zero-copy multi-shard save")

        # the disk filled by someone else, a little room left
        filler = os.path.join(m.target, "filler")
        with open(filler, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, max(free0 - 1 * MiB, 0))
        p = d.rank("save", "--job", job, "--step", 2, "--shards", "after-fill:%d" % (4 * MiB),
                   check_rc=False)
        expect_enospc(p, "disk filled by another file", shard="after-fill")
        check(d.alive(), "ckptd died on a full disk")

        # nothing changed: the first checkpoint is intact, step 2 never
        # committed, the daemon answers
        d.rank("verify", "--job", job, "--step", 1, "--shards", shards_arg(first))
        out = d.rank("latest", "--job", job).stdout.split()
        check(out == ["1", "1"], "latest after the failed saves is %s" % out)
        check(not os.path.exists(os.path.join(state, "jobs", job, "%020d" % 2, "COMMITTED")),
              "a failed step has a COMMITTED file")
        check(not tmp_dirs(state), "tmp dirs left: %s" % tmp_dirs(state))
        d.ctl("status")

        # room again: the same step saves and commits
        os.unlink(filler)
        wait_clean(d, free0, "after removing the filler")
        second = [("model", 3 * MiB + 5), ("tail", 4097)]
        saves_and_restores(d, job, 2, second, zero_copy=True)
        d.rank("verify", "--job", job, "--step", 1, "--shards", shards_arg(first))
        check(d.catalog_integrity() == "ok", "catalog integrity check failed")

        # and it survives a restart on that disk
        check(d.stop() == 0, "ckptd did not exit cleanly")
        d = Daemon(tmp, name="ext4b", state_dir=state, pool="64M", slot="4M").start()
        d.rank("verify", "--job", job, "--step", 2, "--shards", shards_arg(second))
        check(d.stop() == 0, "ckptd did not exit cleanly")
        check(O_DIRECT_WARNING not in d.read_log(), "ckptd fell back from O_DIRECT on ext4")
        d = None
        log("ext4: ok")
    finally:
        if d:
            d.kill()
        m.umount()


def small_fs(tmp, name, fstype, options, limit):
    """tmpfs (size-limited) or ramfs: save/restore, ENOSPC if limited, and
    the O_DIRECT fallback warning where the filesystem refuses O_DIRECT."""
    m = Mount(os.path.join(tmp, name), fstype, fstype, options)
    d = None
    try:
        state = os.path.join(m.target, "state")
        os.makedirs(state)
        direct = odirect_supported(state)
        d = Daemon(tmp, name=name, state_dir=state, pool="64M", slot="4M").start()
        job = name + "-job"
        # sizes that are not multiples of 4 KiB, more than a slot
        spec = [("model", 5 * MiB + 1234), ("small", 100), ("empty", 0)]
        saves_and_restores(d, job, 1, spec)
        saves_and_restores(d, job, 2, spec, zero_copy=True)
        if limit:
            time.sleep(0.2)
            free_before = free_bytes(state)
            p = d.rank("save", "--job", job, "--step", 3, "--shards", "big:%d" % (limit + MiB),
                       check_rc=False)
            expect_enospc(p, "%s: shard > size" % name, shard="big")
            wait_clean(d, free_before, "%s: after ENOSPC" % name)
            check(not tmp_dirs(state), "%s: tmp dirs left: %s" % (name, tmp_dirs(state)))
            saves_and_restores(d, job, 3, [("after", MiB + 1)])
        d.rank("verify", "--job", job, "--step", 2, "--shards", shards_arg(spec))
        check(d.stop() == 0, "%s: ckptd did not exit cleanly" % name)
        text = d.read_log()
        d = None
        if not direct:
            check(O_DIRECT_WARNING in text,
                  "%s refuses O_DIRECT but ckptd logged no fallback warning" % name)
        else:
            check(O_DIRECT_WARNING not in text, "%s takes O_DIRECT, yet ckptd fell back" % name)
        log("%s: ok (O_DIRECT %s)" % (name, "supported" if direct else "refused: fell back"))
    finally:
        if d:
            d.kill()
        m.umount()


def main(tmp):
    if os.geteuid() != 0:
        raise SkipTest("mounting filesystems needs root")
    ext4_full(tmp)
    small_fs(tmp, "tmpfs", "tmpfs", "size=32m", 32 * MiB)
    small_fs(tmp, "ramfs", "ramfs", "mode=0755", 0)


run_test(main)
