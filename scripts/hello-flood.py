#!/usr/bin/env python3
"""Floods a udrma bridge endpoint with strangers' HELLO asks.

From SOURCES distinct loopback addresses (127.1.0.0 upward, a fresh port
each) it sends a HELLO ask without a cookie, one with a random (forged)
cookie, and a datagram of random junk. The HELLO is encoded here from
docs/wire-format.md, independently of the Rust code.

Usage: scripts/hello-flood.py HOST:PORT [SOURCES]   (default 20000)
"""
import os
import random
import socket
import struct
import sys
import zlib


def hello_ask(nonce, cookie):
    # Common header: version 1, opcode HELLO, every other field zero but
    # the epoch (offset 28).
    header = bytes([1, 0x24]) + bytes(26) + struct.pack(">I", 77)
    # Extension (48 B): phase 0 (ask), reserved, max payload, nonce, no
    # region (24 B: address, length, rkey, ports, reserved), cookie.
    ext = bytes([0, 0]) + struct.pack(">HI", 1400, nonce) + bytes(24) + cookie
    body = header + ext
    return body + struct.pack(">I", zlib.crc32(body))


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    target = (host, int(port))
    sources = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    rng = random.Random(5)
    sent = 0
    for i in range(sources):
        ip = "127.1.%d.%d" % ((i >> 8) & 0xFF, i & 0xFF) if i < 65536 else "127.2.%d.%d" % ((i >> 8) & 0xFF, i & 0xFF)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((ip, 0))
            for d in (
                hello_ask(i, bytes(16)),
                hello_ask(i, bytes(rng.getrandbits(8) for _ in range(16))),
                bytes(rng.getrandbits(8) for _ in range(rng.randrange(1400))),
            ):
                s.sendto(d, target)
                sent += 1
        except OSError as e:
            print("source %s: %s" % (ip, e), file=sys.stderr)
        finally:
            s.close()
    print("%d datagrams from %d sources" % (sent, sources))


if __name__ == "__main__":
    main()
