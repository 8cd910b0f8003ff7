"""Net: `barge send SET TICKET` into `barge recv --listen ADDR:0 DEST` (encrypted and
authenticated; the reference) against the tree transfers people use instead, each landing the
data set from tmpfs into a DEST on the same tmpfs that does not exist yet (removed before every
run, outside the timed region), as root. A run's time goes from the start of the sending side
until the receiving side has exited; the receiver is started before it and is ready once it
listens (barge recv: once it printed its ticket). Both ends run on this machine, in network
namespaces the suite makes (and removes, with every process in them, at its end, on an error
or an interrupt, or at the next run after a kill).

The loopback rows run in a namespace of their own, over its 127.0.0.1:

- `barge send | recv`, and with `--compress` (zstd, negotiated by the sender);
- `tar -cf - . | nc -q0 127.0.0.1 P` into `nc -l -p P | tar -xf - -C DEST` (netcat-openbsd):
  neither authenticated nor encrypted;
- `rsync -a` over ssh to root@127.0.0.1: a private sshd (openssh-server) on port 2222 of that
  namespace, with a host key and an authorized client key made for the run (the system's ssh
  configuration is neither read nor changed: `ssh -F /dev/null`, `sshd -f` of the run's file),
  OpenSSH's default cipher and no compression. Its user and sys times miss the receiving
  rsync, a child of sshd;
- `barge pack SET | barge unpack - DEST` over a pipe (no network, no crypto): what the stream
  costs without the channel.

The `update:` rows run on an unchanged copy (made once with `cp -a`): `barge send --update`
(which asks the receiver what DEST has and sends only what differs: here nothing) against
`rsync -a` over ssh of the same unchanged tree.

The `link:` rows (linux only) cross an emulated link: three namespaces, sender - router -
receiver, joined by two veth pairs, with `tc qdisc add dev s0 root tbf rate 1gbit burst 128kb
latency 20ms` on the sender's veth (this kernel has no netem) and 20 ms of one-way delay in each
direction (40 ms round trip) from bench/netrelay.py: the router's policy routing sends every
packet arriving from either veth into a TUN device, where the relay holds it 20 ms, then writes
it back to be forwarded. The relay works on packets, not on TCP streams, so TCP sees the delay
in its round-trip time as on a real link; it takes whole GSO packets (up to 64 KiB, TSO offload
on the TUN device), a few thousand a second at 1 Gbit/s, for which it used a fifth of a core
(0.86 Gbit/s over 4 streams, 2026-11-24). The namespaces keep the kernel's TCP
defaults (send buffer up to 4 MiB, so one connection carries at most ~4 MiB per 40 ms). The
rows `dd | nc` (512 MiB of zeros over one connection) and `dd | nc, 4 streams` (4 x 128 MiB, in
parallel) measure what one connection and what the link carry; "share of 1 Gbit/s" is the
payload (the set's file bytes, or dd's) per second over 10^9 bits (at 1,500-byte packets at
most ~95% of it is TCP payload).

"Receiver peak MiB" is the peak resident memory of the receiving side (barge recv with its
confined lander, tar, barge unpack); barge rows are checked against the source digest (modes
and mtimes included) after every run, peers after their warm-up run.

Ratios are peer time / barge time of the same round: 2.0x means barge took half the time.
"""

import os
import signal
import subprocess
import sys
import time

import lib

# Issue 16 targets: (set, case label, minimum median ratio vs the barge row of its group).
TARGETS = [
    ("linux", "tar | nc | tar", 1.5),
    ("linux", "rsync -a over ssh", 5.0),
    ("tiny-many", "tar | nc | tar", 2.0),
    ("linux", "update: rsync -a over ssh", 3.0),
    ("tiny-many", "update: rsync -a over ssh", 3.0),
]
# (set, case label, field, minimum): barge over the emulated link at 90% of 1 Gbit/s.
MINIMA = [("linux", "link: barge send | recv", "link_share", 0.9)]

NS_LO, NS_S, NS_R, NS_D = "barge-bench-lo", "barge-bench-s", "barge-bench-r", "barge-bench-d"
NAMESPACES = (NS_LO, NS_S, NS_R, NS_D)
S_ADDR, R_S_ADDR, D_ADDR, R_D_ADDR = "10.77.1.1", "10.77.1.2", "10.77.2.1", "10.77.2.2"
SSH_PORT, NC_PORT = 2222, 5201
# netcat-openbsd by its own name (`nc` may be another netcat).
NC = "nc.openbsd"
LINK_BPS = 10**9
TBF = ["rate", "1gbit", "burst", "128kb", "latency", "20ms"]
DELAY = 0.020
DD_BYTES = 512 << 20
STREAMS = 4


def netns(name, *argv):
    """argv run in network namespace `name`."""
    return ["ip", "netns", "exec", name, *argv]


def sh(*argv):
    """Runs argv; raises if it fails."""
    subprocess.run(argv, check=True)


def teardown():
    """Kills every process in the suite's namespaces (by pid: they are all the suite's) and
    removes the namespaces."""
    have = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for ns in NAMESPACES:
        if ns not in have:
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], check=False)


def make_ns(name):
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")


def sysctl(ns, *settings):
    """sysctl -w each "key=value" of `settings` in namespace `ns`."""
    for setting in settings:
        sh(*netns(ns, "sysctl", "-q", "-w", setting))


class Sshd:
    """A private sshd on SSH_PORT of namespace NS_LO with a host key and an authorized client
    key made for this run; ``ssh`` is the client command rsync's -e takes."""

    def __init__(self, work):
        d = os.path.join(work, "ssh")
        lib.fresh_dir(d)
        host, client = os.path.join(d, "host_ed25519"), os.path.join(d, "client_ed25519")
        for key in (host, client):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "barge-bench", "-f", key)
        os.rename(client + ".pub", os.path.join(d, "authorized_keys"))
        config = os.path.join(d, "sshd_config")
        with open(config, "w") as f:
            f.write(
                f"Port {SSH_PORT}\nListenAddress 127.0.0.1\nHostKey {host}\n"
                f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "StrictModes no\nPidFile none\nLogLevel ERROR\n"
            )
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        with open(os.path.join(d, "sshd.log"), "w") as log:
            self.proc = subprocess.Popen(
                netns(NS_LO, "/usr/sbin/sshd", "-D", "-e", "-f", config),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )
        for _ in range(1000):
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {open(os.path.join(d, 'sshd.log')).read()}")
            if lib.listening(self.proc.pid, [SSH_PORT]):
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"sshd did not listen on port {SSH_PORT}")
        self.ssh = (
            f"ssh -F /dev/null -p {SSH_PORT} -i {client} -o IdentitiesOnly=yes -o BatchMode=yes"
            " -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
            " -o ConnectTimeout=10 -o ServerAliveInterval=10"
        )

    def rsync(self, src, dest):
        """rsync -a of the tree `src` to `dest` on 127.0.0.1, over this sshd."""
        return lib.cmd(*netns(NS_LO, "rsync", "-a", "-e", self.ssh, src + "/", f"root@127.0.0.1:{dest}/"))


def emulated_link():
    """Sender (NS_S, S_ADDR) - router (NS_R) - receiver (NS_D, D_ADDR), rate-limited by tbf on
    the sender's veth and delayed by bench/netrelay.py in the router; returns the relay's
    Popen (it exits when its stdin closes, or at teardown)."""
    for ns in (NS_S, NS_R, NS_D):
        make_ns(ns)
    sh("ip", "link", "add", "s0", "netns", NS_S, "type", "veth", "peer", "name", "r0", "netns", NS_R)
    sh("ip", "link", "add", "d0", "netns", NS_D, "type", "veth", "peer", "name", "r1", "netns", NS_R)
    for ns, dev, addr, gw in ((NS_S, "s0", S_ADDR, R_S_ADDR), (NS_D, "d0", D_ADDR, R_D_ADDR)):
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", gw)
    for dev, addr in (("r0", R_S_ADDR), ("r1", R_D_ADDR)):
        sh("ip", "-n", NS_R, "addr", "add", addr + "/24", "dev", dev)
        sh("ip", "-n", NS_R, "link", "set", dev, "up")
    relay = subprocess.Popen(
        netns(NS_R, sys.executable, os.path.join(lib.ROOT, "bench", "netrelay.py"), "delay0", str(DELAY)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    if relay.stdout.readline() != b"ready\n":
        raise RuntimeError("bench/netrelay.py did not start")
    # `ip netns exec` execs the relay: the pid is the relay's.
    lib.bench_helper(relay.pid)
    sh("ip", "-n", NS_R, "link", "set", "delay0", "up")
    # Packets the relay writes back arrive from delay0: not the reverse path of their source.
    sysctl(NS_R, *(f"net.ipv4.conf.{dev}.rp_filter=0" for dev in ("all", "default", "r0", "r1", "delay0")))
    for dev in ("r0", "r1"):
        sh("ip", "-n", NS_R, "rule", "add", "iif", dev, "lookup", "100")
    sh("ip", "-n", NS_R, "route", "add", "default", "dev", "delay0", "table", "100")
    sysctl(NS_R, "net.ipv4.ip_forward=1")
    sh("tc", "-n", NS_S, "qdisc", "add", "dev", "s0", "root", "tbf", *TBF)
    return relay


def barge_duet(ctx, ns, addr, src, dest, *flags):
    """barge send [flags] `src` into barge recv --listen `addr`:0 `dest`, both in `ns`."""
    recv = lib.cmd(*netns(ns[1], ctx.barge, "recv", "--listen", f"{addr}:0", dest))
    shown = lib.cmd(*netns(ns[0], ctx.barge, "send", *flags, src, "TICKET"))

    def sender(ticket):
        return lib.cmd(*netns(ns[0], ctx.barge, "send", *flags, src, ticket))

    return lib.Duet(recv, sender, shown=str(shown))


def tar_duet(ns, addr, src, dest):
    """tar -cf - . | nc -q0 into nc -l | tar -xf -, sender in ns[0], receiver in ns[1]."""
    recv = lib.pipeline(netns(ns[1], NC, "-l", "-p", str(NC_PORT)), ["tar", "-xf", "-", "-C", dest])
    send = lib.pipeline(["tar", "-cf", "-", "."], netns(ns[0], NC, "-q0", addr, str(NC_PORT)), cwd=src)
    return lib.Duet(recv, send, ready=(NC_PORT,))


def dd_duet(streams):
    """`streams` parallel connections carrying DD_BYTES in all across the emulated link."""
    ports = [NC_PORT + i for i in range(streams)]
    mib = DD_BYTES // streams >> 20
    recv = " & ".join(f"{NC} -l -p {p} >/dev/null" for p in ports) + " & wait"
    send = " & ".join(f"dd if=/dev/zero bs=1M count={mib} status=none | {NC} -q0 {D_ADDR} {p}" for p in ports)
    return lib.Duet(
        lib.cmd(*netns(NS_D, "sh", "-c", recv)), lib.cmd(*netns(NS_S, "sh", "-c", send + " & wait")),
        ready=tuple(ports),
    )


def absent(dest):
    """A setup removing `dest` (the receivers make it)."""
    return lambda: lib.remove(dest)


def empty(dest):
    """A setup making `dest` empty (tar -C needs it)."""
    return lambda: lib.fresh_dir(dest)


def checker(ds, dest):
    def check():
        lib.verify_tree(dest, ds, meta=True)

    return check


def case(label, command, setup, check, rss=True):
    """A row whose output is checked (flagged when wrong) and, with `rss`, whose receiver's
    peak memory is reported."""
    return lib.Case(label, command, setup, check, flag=True, rss=rss)


def transfer_cases(ctx, ds, sshd, dest):
    """The loopback rows landing `ds` into the absent `dest`."""
    lo, src = (NS_LO, NS_LO), ds.root
    check = checker(ds, dest)
    pipe = lib.pipeline([ctx.barge, "pack", src], [ctx.barge, "unpack", "-", dest])
    return [
        case("barge send | recv", barge_duet(ctx, lo, "127.0.0.1", src, dest), absent(dest), check),
        case(
            "barge send --compress | recv",
            barge_duet(ctx, lo, "127.0.0.1", src, dest, "--compress"), absent(dest), check,
        ),
        case("barge pack | barge unpack - (no network)", pipe, absent(dest), check),
        case("tar | nc | tar", tar_duet(lo, "127.0.0.1", src, dest), empty(dest), lib.once(check)),
        case("rsync -a over ssh", sshd.rsync(src, dest), absent(dest), lib.once(check), rss=False),
    ]


def update_cases(ctx, ds, sshd, copy):
    """barge send --update and rsync -a over ssh of `ds` into its unchanged copy `copy`."""
    check = checker(ds, copy)
    duet = barge_duet(ctx, (NS_LO, NS_LO), "127.0.0.1", ds.root, copy, "--update")
    return [
        case("update: barge send --update | recv", duet, None, check),
        case("update: rsync -a over ssh", sshd.rsync(ds.root, copy), None, lib.once(check), rss=False),
    ]


def link_cases(ctx, ds, dest):
    """The emulated link's rows, each with the payload bytes its rate is computed from."""
    sd, src = (NS_S, NS_D), ds.root
    check = checker(ds, dest)
    return [
        (case("link: barge send | recv", barge_duet(ctx, sd, D_ADDR, src, dest), absent(dest), check), ds.bytes),
        (
            case(
                "link: barge send --compress | recv",
                barge_duet(ctx, sd, D_ADDR, src, dest, "--compress"), absent(dest), check,
            ),
            ds.bytes,
        ),
        (case("link: tar | nc | tar", tar_duet(sd, D_ADDR, src, dest), empty(dest), lib.once(check)), ds.bytes),
        (lib.Case("link: dd | nc", dd_duet(1)), DD_BYTES),
        (lib.Case(f"link: dd | nc, {STREAMS} streams", dd_duet(STREAMS)), DD_BYTES),
    ]


def has_send(barge):
    """Whether this barge has send and recv (without them the barge send rows are left out)."""
    helps = (subprocess.run([barge, c, "--help"], capture_output=True) for c in ("send", "recv"))
    return all(h.returncode == 0 for h in helps)


def run(ctx):
    work = os.path.join(lib.WORK, "net")
    dest, copy = os.path.join(work, "dest"), os.path.join(work, "copy")
    send = has_send(ctx.barge)
    if not send:
        print("bench net: **this barge has no send/recv: the barge send rows are left out**", flush=True)

    def usable(cases):
        return [c for c in cases if send or "barge send" not in c.label]

    out = {}
    teardown()
    try:
        make_ns(NS_LO)
        sshd = Sshd(work)
        for ds in ctx.sets:
            pairs = lib.pairs_for(ds, ctx.pairs)
            res = lib.measure(usable(transfer_cases(ctx, ds, sshd, dest)), pairs, ds.files, trace=False)
            lib.remove(dest)
            lib.remove(copy)
            subprocess.run(["cp", "-a", ds.root, copy], check=True)
            res += lib.measure(usable(update_cases(ctx, ds, sshd, copy)), pairs, ds.files, trace=False)
            lib.remove(copy)
            if ds.name == "linux":
                emulated_link()
                cases = [(c, size) for c, size in link_cases(ctx, ds, dest) if usable([c])]
                link = lib.measure([c for c, _ in cases], pairs, ds.files, trace=False)
                for r, (_, size) in zip(link, cases):
                    r["link_share"] = size * 8 / r["median"] / LINK_BPS
                res += link
                lib.remove(dest)
            out[ds.name] = {"cases": res}
    finally:
        teardown()
        lib.remove(work)
    return out
