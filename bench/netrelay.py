#!/usr/bin/env python3
"""The delay of bench/run net's emulated link: a TUN device whose every packet is held DELAY
seconds, then written back into the kernel (Python 3 standard library only).

    netrelay.py NAME DELAY      (run inside the router namespace, as root)

Creates the TUN device NAME with the virtio-net header and TSO offloads, so the kernel hands it
whole GSO packets (up to 64 KiB: ~2,000 reads a second at 1 Gbit/s, which one Python thread
keeps up with) instead of 1,500-byte segments, and takes them back whole. The router's policy
routing sends what arrives from either veth into NAME; what the relay writes back arrives from
NAME and is routed by the main table to its veth, so each direction is delayed once and TCP
sees the delay in its round-trip time (a relay that ended TCP connections would hide it).
Prints "ready" once the device exists; exits when its standard input closes (the harness
died), on SIGTERM or SIGINT; the device goes with it.
"""

import collections
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN, IFF_NO_PI, IFF_VNET_HDR = 0x0001, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
# A GSO packet, its virtio-net header and some slack.
PACKET = 65536 + 256


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR))
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    return fd


def relay(fd, delay):
    """Holds each packet read from `fd` for `delay` seconds, then writes it back."""
    held = collections.deque()
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    poll.register(sys.stdin.fileno(), select.POLLIN)
    while True:
        now = time.monotonic()
        while held and held[0][0] <= now:
            try:
                os.write(fd, held.popleft()[1])
            except OSError:
                pass  # the kernel refused one packet (e.g. no route yet): it is lost, as on a wire
        timeout = None if not held else max(0.0, held[0][0] - now) * 1000
        for ready, _ in poll.poll(timeout):
            if ready != fd:
                return  # stdin readable: EOF, the harness is gone
            while True:
                try:
                    packet = os.read(fd, PACKET)
                except BlockingIOError:
                    break
                held.append((time.monotonic() + delay, packet))


def main():
    name, delay = sys.argv[1], float(sys.argv[2])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd = open_tun(name)
    print("ready", flush=True)
    try:
        relay(fd, delay)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
