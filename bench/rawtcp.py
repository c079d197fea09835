#!/usr/bin/env python3
"""Raw TCP throughput baseline for `nacre selftest`: CONNS connections over loopback (or to a
given address) each moving SIZE-byte messages for SECS seconds, in one direction.
Prints MiB/s. Usage: rawtcp.py SIZE CONNS SECS [write|read]"""
import socket, sys, threading, time

size, conns, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "write"
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(conns)
port = srv.getsockname()[1]
stop = time.time() + secs
moved = [0] * conns


def sink(c, i):
    buf = bytearray(size)
    view = memoryview(buf)
    while True:
        n = c.recv_into(view)
        if n == 0:
            return
        moved[i] += n


def source(c):
    data = b"\xa5" * size
    while time.time() < stop:
        c.sendall(data)
    c.shutdown(socket.SHUT_WR)


def accept():
    for i in range(conns):
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=(sink if mode == "write" else source),
                         args=((c, i) if mode == "write" else (c,)), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
threads = []
t0 = time.time()
for i in range(conns):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = threading.Thread(target=(source if mode == "write" else sink),
                         args=((c,) if mode == "write" else (c, i)))
    t.start()
    threads.append(t)
for t in threads:
    t.join()
print(round(sum(moved) / (1 << 20) / (time.time() - t0)))
