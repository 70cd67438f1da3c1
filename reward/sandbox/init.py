# lanpo's sandbox set-up, run by reward/sandbox.go as the first process of a
# candidate's sandbox, before any candidate code exists in it. argv[1] is
# its settings (JSON). In namespaces mode it starts as root of fresh user,
# PID, mount, network, IPC and UTS namespaces (uid 0 inside mapped to the
# trainer's uid), builds a root of read-only binds and one size-capped
# tmpfs, sets the limits, drops to the sandbox uid with no capabilities,
# and execs the harness. In none mode it only sets the limits and execs.
# Any failure is the line "SETUP <what failed>" on fd 4, exit status 97.
import ctypes, json, os, platform, resource, signal, sys

cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


def die(what):
    os.write(4, ("SETUP %s\n" % what).encode())
    os._exit(97)


def call(what, rc):
    if rc != 0:
        e = ctypes.get_errno()
        die("%s: %s" % (what, os.strerror(e)))


def mount(src, dst, fs, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    call("mount %s on %s" % (src or fs or "(remount)", dst),
         libc.mount(enc(src), enc(dst), enc(fs), ctypes.c_ulong(flags), enc(data)))


def bind_ro(root, path):
    """path, seen read-only (nosuid, nodev) at the same place under root."""
    real = os.path.realpath(path)
    dst = root + path
    if os.path.islink(path) and os.path.dirname(real) == "/":
        # /bin -> usr/bin style: the same link inside.
        if not os.path.lexists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(os.readlink(path), dst)
        return
    if os.path.isdir(real):
        os.makedirs(dst, exist_ok=True)
    elif os.path.isfile(real):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    else:
        return
    mount(real, dst, None, MS_BIND | MS_REC)
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(cfg):
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # The new root is mounted over /tmp in this mount namespace only: the
    # host's /tmp is neither read nor written.
    root = "/tmp"
    mount("lanpo-sandbox", root, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,nr_inodes=4096,mode=0755")
    for p in cfg["binds"]:
        if os.path.lexists(p):
            bind_ro(root, p)
    dev = root + "/dev"
    os.makedirs(dev, exist_ok=True)
    for n in ("null", "zero", "random", "urandom"):
        open(dev + "/" + n, "a").close()
        mount("/dev/" + n, dev + "/" + n, None, MS_BIND)
        mount(None, dev + "/" + n, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    os.makedirs(root + "/proc", exist_ok=True)
    # A proc of this PID namespace: only the sandbox's own processes. Where
    # the kernel refuses (a container that masks parts of /proc), /proc
    # stays an empty directory.
    if libc.mount(b"proc", (root + "/proc").encode(), b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) != 0:
        pass
    work = root + cfg["work"]
    os.makedirs(work, exist_ok=True)
    uid = cfg["uid"]
    # noexec: nothing the candidate writes is mapped executable (a shared
    # object it compiled, a binary it dropped).
    mount("lanpo-work", work, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          "size=%dk,nr_inodes=%d,mode=0700,uid=%d,gid=%d" % (cfg["tmpfs_kb"], cfg["inodes"], uid, uid))
    os.chdir(root)
    os.mkdir(".old")
    nr = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}.get(platform.machine())
    if nr is None:
        die("pivot_root: unknown machine %s" % platform.machine())
    call("pivot_root", libc.syscall(nr, b".", b".old"))
    os.chdir("/")
    call("umount old root", libc.umount2(b"/.old", MNT_DETACH))
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m")
    libc.sethostname(b"sandbox", 7)


def no_nesting():
    """No namespaces inside this one (a nested user namespace would give the
    candidate mounts of its own — a tmpfs beyond tmpfs_mb — and much more
    of the kernel to attack), and no executable memfds where the kernel has
    the switch. Both are per namespace: the host's stay as they are."""
    for ns in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"):
        try:
            with open("/proc/sys/user/max_%s_namespaces" % ns, "w") as f:
                f.write("0")
        except OSError as e:
            if ns == "user":
                die("max_user_namespaces: %s" % e)
    try:
        with open("/proc/sys/vm/memfd_noexec", "w") as f:
            f.write("2")
    except OSError:
        pass  # kernels before 6.3: the tmpfs is noexec, memfds are not


def drop(cfg):
    try:
        os.setgroups([])
    except PermissionError:
        pass  # setgroups denied: an unprivileged trainer's one-gid map
    # No capability in any set, the bounding set included, and none to
    # regain.
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if cfg["switch_uid"]:
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])  # clears the rest
    else:
        # One uid mapped (an unprivileged trainer): stay uid 0 inside.
        hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        call("capset", libc.capset(hdr, data))


def limits(cfg):
    cpu = cfg["cpu_s"]
    lim = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, cfg["as_bytes"], cfg["as_bytes"]),
        (resource.RLIMIT_FSIZE, cfg["fsize_bytes"], cfg["fsize_bytes"]),
        (resource.RLIMIT_NOFILE, cfg["nofile"], cfg["nofile"]),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, cfg["nproc"], cfg["nproc"]),
    ]
    for r, soft, hard in lim:
        try:
            resource.setrlimit(r, (soft, hard))
        except (ValueError, OSError) as e:
            die("setrlimit %d: %s" % (r, e))


try:
    if cfg["mode"] == "namespaces":
        build_root(cfg)
        no_nesting()
    limits(cfg)
    if cfg["mode"] == "namespaces":
        drop(cfg)
    call("no_new_privs", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    # A uid change clears the parent-death signal: set it again.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.chdir(cfg["work"])
    os.execve(cfg["python"], cfg["argv"], cfg["env"])
except Exception as e:
    die("%s: %s" % (type(e).__name__, e))
