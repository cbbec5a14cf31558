"""slowclients.py - many slow HTTP clients, for the tests and the benchmark of the daemons'
connection guard (src/base/connguard.h). NOT a client of anvil: an attacker.

Each connection sends a request line and a Host header at once, then one more header byte
every `interval` seconds, and never finishes its headers (a slowloris). One the server closes
(refused at once, cut at its deadline, or closed to make room) is opened again after about
`reopen` seconds. The connections come from loopback addresses other than 127.0.0.1
(127.0.0.`first`, the next, ...: all of 127.0.0.0/8 is loopback on Linux), so the daemons'
own traffic on 127.0.0.1 is another address; `addresses` of them share the connections. One
thread, one epoll set (selectors); standard library only.

    with SlowClients([("127.0.0.1", 7070)], per_target=5000) as s:
        ...          # s.open_now(), s.opened, s.closed
"""
import errno
import heapq
import random
import resource
import selectors
import socket
import threading
import time

# Linux: bind the source address now, its port at connect, so ports are shared across
# destinations (socket.IP_BIND_ADDRESS_NO_PORT where Python names it)
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
HEAD = b"GET /v1/jobs HTTP/1.1\r\nHost: anvil\r\n"
TRICKLE = b"X-Slow: " + b"a" * 8000


def raise_nofile(need):
    """Raises this process's soft open-file limit to the hard one; returns it. Fails when
    even that is below need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(need, soft)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < need:
        raise RuntimeError("the open-file limit (hard %d) is below the %d this needs: "
                           "raise it (ulimit -Hn)" % (target, need))
    return target


class SlowClients:
    def __init__(self, targets, per_target, addresses=20, first=2, interval=1.0, reopen=1.0):
        self.targets = list(targets)
        self.first = first
        self.n = per_target * len(self.targets)
        self.addresses = addresses
        self.interval = interval
        self.reopen = reopen
        self.socks = [None] * self.n
        self.sent = [0] * self.n
        self.opened = 0       # connections opened, reopens included
        self.closed = 0       # of them, closed by the other side
        self.failed = 0       # connects that failed at once
        self.sel = selectors.DefaultSelector()
        self.stopping = False
        self.thread = None
        raise_nofile(self.n + 1024)

    def source(self, i):
        return "127.0.0.%d" % (self.first + (i // len(self.targets)) % self.addresses)

    def open_now(self):
        return sum(1 for s in self.socks if s is not None)

    def _open(self, i):
        host, port = self.targets[i % len(self.targets)]
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((self.source(i), 0))
            s.setblocking(False)
            rc = s.connect_ex((host, port))
            if rc not in (0, errno.EINPROGRESS):
                raise OSError(rc, "connect")
        except OSError:
            s.close()
            self.failed += 1
            return False
        self.socks[i] = s
        self.sent[i] = 0
        self.sel.register(s, selectors.EVENT_READ, i)
        self.opened += 1
        return True

    def _close(self, i, later):
        s = self.socks[i]
        self.sel.unregister(s)
        s.close()
        self.socks[i] = None
        self.closed += 1
        heapq.heappush(later, (time.monotonic() + self.reopen * (0.5 + random.random()), i))

    def _trickle(self, i, later):
        """The request line first, then one byte a pass."""
        s = self.socks[i]
        data = HEAD if self.sent[i] == 0 else TRICKLE[self.sent[i] - len(HEAD):][:1]
        if not data:
            return
        try:
            n = s.send(data)
            self.sent[i] += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            if e.errno == errno.ENOTCONN:
                return
            self._close(i, later)

    def _loop(self):
        later = [(time.monotonic() + k * 0.0001, k) for k in range(self.n)]  # a heap
        next_pass = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            while later and later[0][0] <= now and not self.stopping:
                _, i = heapq.heappop(later)
                if not self._open(i):
                    heapq.heappush(later, (now + self.reopen, i))
            if now >= next_pass:
                for i in range(self.n):
                    if self.socks[i] is not None:
                        self._trickle(i, later)
                next_pass = now + self.interval
            for key, _ in self.sel.select(timeout=0.05):
                i = key.data
                try:
                    data = key.fileobj.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._close(i, later)

    def start(self):
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stopping = True
        if self.thread:
            self.thread.join()
        for i, s in enumerate(self.socks):
            if s is not None:
                self.sel.unregister(s)
                s.close()
                self.socks[i] = None
        self.sel.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
