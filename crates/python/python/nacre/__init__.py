"""The node's client API of the Nacre file system (docs/api.md).

Files are read and written through the node's ``nacre mount`` process, not through FUSE::

    import nacre, numpy
    fs = nacre.connect("/mnt/nacre")
    fs.setstripe("ckpt/weights.npy", count=4, size=4 << 20)
    with fs.open("ckpt/weights.npy", "r+b") as f:
        numpy.save(f, weights)
    with fs.open("ckpt/weights.npy", "rb") as f:
        back = numpy.load(f)

Paths are relative to the mount's root. ``open`` takes the modes of the builtin ``open``
and returns the same kinds of objects (buffered binary files, text files, or with
``buffering=0`` a raw file). Reads go straight into the memory of buffer-protocol objects
(``readinto`` of a bytearray, memoryview or numpy array; ``pread_into``) and writes leave
from it, with no copy in Python. Errors are ``OSError`` subclasses with the errno.
"""

import io
import os
import stat as _stat

from ._nacre import API_VERSION, Fs as _Fs, RawFile as _RawFile  # noqa: F401

__all__ = ["connect", "Nacre", "NacreRawFile", "API_VERSION"]

#: Buffer size of the buffered files ``open`` returns (large transfers bypass it).
BUFFER_SIZE = 1 << 20


def _b(path):
    return os.fsencode(path)


def _stat_result(t):
    mode, ino, nlink, uid, gid, size, atime, mtime, ctime, blocks = t
    ns = [sec * 1_000_000_000 + nsec for sec, nsec in (atime, mtime, ctime)]
    fields = (mode, ino, 0, nlink, uid, gid, size, atime[0], mtime[0], ctime[0])
    # os.stat_result takes the float times and the nanosecond times after the ten.
    extra = (ns[0] / 1e9, ns[1] / 1e9, ns[2] / 1e9, ns[0], ns[1], ns[2], 512 * 8, blocks)
    return os.stat_result(fields + extra)


class NacreRawFile(io.RawIOBase):
    """An open file as ``io.RawIOBase``: a position of its own, ``readinto`` into any
    writable buffer, ``write`` from any buffer; ``pread``/``pread_into``/``pwrite`` at an
    offset; ``fsync``. No ``fileno``: it is not a kernel file."""

    def __init__(self, raw, name, mode, readable, writable, append):
        super().__init__()
        self._raw = raw
        self.name = name
        self.mode = mode
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = 0

    def readable(self):
        return self._readable

    def writable(self):
        return self._writable

    def seekable(self):
        return True

    def readinto(self, b):
        self._checkClosed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        n = self._raw.pread_into(memoryview(b).cast("B"), self._pos)
        self._pos += n
        return n

    def write(self, b):
        self._checkClosed()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        view = memoryview(b).cast("B")
        n = self._raw.pwrite(view, self._pos)
        self._pos = self._size() if self._append else self._pos + n
        return n

    def _size(self):
        return self._raw.fstat()[5]

    def seek(self, offset, whence=io.SEEK_SET):
        self._checkClosed()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size() + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(22, "Invalid argument")
        self._pos = pos
        return pos

    def tell(self):
        self._checkClosed()
        return self._pos

    def truncate(self, size=None):
        self._checkClosed()
        size = self._pos if size is None else size
        self._raw.truncate(size)
        return size

    def fileno(self):
        raise io.UnsupportedOperation("a Nacre API file has no kernel descriptor")

    def fsync(self):
        """Makes what was written durable on the OSTs."""
        self._checkClosed()
        self._raw.fsync()

    def stat(self):
        return _stat_result(self._raw.fstat())

    def pread(self, size, offset):
        buf = bytearray(size)
        n = self._raw.pread_into(memoryview(buf), offset)
        del buf[n:]
        return bytes(buf)

    def pread_into(self, buffer, offset):
        return self._raw.pread_into(memoryview(buffer).cast("B"), offset)

    def pwrite(self, buffer, offset):
        return self._raw.pwrite(memoryview(buffer).cast("B"), offset)

    def close(self):
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


def _flags(mode):
    chars = set(mode)
    if not chars <= set("rwaxbt+") or len(chars) != len(mode):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = chars & set("rwax")
    if len(kinds) != 1 or ("b" in chars and "t" in chars):
        raise ValueError(f"invalid mode: {mode!r}")
    plus = "+" in chars
    kind = kinds.pop()
    readable = kind == "r" or plus
    writable = kind != "r" or plus
    acc = os.O_RDWR if readable and writable else os.O_RDONLY if readable else os.O_WRONLY
    extra = {"r": 0, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND,
             "x": os.O_CREAT | os.O_EXCL}[kind]
    return acc | extra, readable, writable, kind == "a", "b" in chars


def _raw_of(f):
    """The native file of a file object ``Nacre.open`` returned."""
    while not isinstance(f, NacreRawFile):
        f = getattr(f, "buffer", None) or getattr(f, "raw", None)
        if f is None:
            raise TypeError("not a file opened by nacre")
    f._checkClosed()
    return f._raw


class Ring:
    """A ring of the node's client (see ``Nacre.ring``). Buffered files are not flushed by
    it: give it raw files (``buffering=0``) or flush them first."""

    def __init__(self, native):
        self._ring = native

    @property
    def entries(self):
        return self._ring.entries

    @property
    def in_flight(self):
        return self._ring.in_flight

    def buffers(self):
        """The ring's buffers as a writable memoryview."""
        return memoryview(self._ring)

    def prep_read(self, file, offset, buf_offset, length, user_data=0):
        self._ring.prep_read(_raw_of(file), offset, buf_offset, length, user_data)

    def prep_write(self, file, offset, buf_offset, length, user_data=0):
        self._ring.prep_write(_raw_of(file), offset, buf_offset, length, user_data)

    def prep_fsync(self, file, user_data=0):
        self._ring.prep_fsync(_raw_of(file), user_data)

    def submit(self):
        return self._ring.submit()

    def wait(self, min=1, timeout=None):
        """Completions as (user_data, result) pairs: bytes moved, or a negative errno."""
        return self._ring.wait(min, timeout)


class Nacre:
    """A connection to the node's client of one mount."""

    def __init__(self, mount):
        self._fs = _Fs(os.fspath(mount))

    @property
    def fsname(self):
        return self._fs.fsname

    def open(self, path, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        """As the builtin ``open``, for ``path`` relative to the mount's root."""
        flags, readable, writable, append, binary = _flags(mode)
        if binary and (encoding or errors or newline):
            raise ValueError("binary mode takes no encoding, errors or newline")
        raw = NacreRawFile(self._fs.open(_b(path), flags, 0o666), os.fspath(path), mode,
                           readable, writable, append)
        if append:
            raw.seek(0, io.SEEK_END)
        if buffering == 0:
            if not binary:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = BUFFER_SIZE if buffering in (-1, 1) else buffering
        if readable and writable:
            buffered = io.BufferedRandom(raw, size)
        elif writable:
            buffered = io.BufferedWriter(raw, size)
        else:
            buffered = io.BufferedReader(raw, size)
        if binary:
            return buffered
        return io.TextIOWrapper(buffered, encoding or "utf-8", errors, newline,
                                line_buffering=buffering == 1)

    def stat(self, path):
        return _stat_result(self._fs.stat(_b(path), True))

    def lstat(self, path):
        return _stat_result(self._fs.stat(_b(path), False))

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def isdir(self, path):
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def listdir(self, path="."):
        return [os.fsdecode(name) for name, _, _ in self._fs.listdir(_b(path))]

    # Modes are reduced by the process's umask in the library, as the kernel would.
    def mkdir(self, path, mode=0o777):
        self._fs.mkdir(_b(path), mode)

    def makedirs(self, path, mode=0o777, exist_ok=False):
        parts = [p for p in os.fspath(path).split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            try:
                self.mkdir(sub, mode)
            except FileExistsError:
                if i == len(parts) and not exist_ok:
                    raise

    def rmdir(self, path):
        self._fs.rmdir(_b(path))

    def remove(self, path):
        self._fs.unlink(_b(path))

    unlink = remove

    def rename(self, src, dst):
        self._fs.rename(_b(src), _b(dst))

    def link(self, src, dst):
        self._fs.link(_b(src), _b(dst))

    def symlink(self, target, path):
        self._fs.symlink(_b(target), _b(path))

    def readlink(self, path):
        return os.fsdecode(self._fs.readlink(_b(path)))

    def setstripe(self, path, count=0, size=0, pool=None, mode=0o666):
        """Creates the empty file ``path`` striped over ``count`` OSTs (-1: all) in
        ``size``-byte chunks, in OST pool ``pool`` (0 and None: the defaults)."""
        self._fs.setstripe(_b(path), count, size, pool, mode)

    def ring(self, entries=32, buffer_bytes=32 << 20):
        """A ring: many requests in flight from one thread, queued with ``prep_read``/
        ``prep_write``/``prep_fsync`` and published as one batch by ``submit``;
        ``memoryview(ring)`` is its buffers (shared with the node's client)."""
        return Ring(self._fs.ring(entries, buffer_bytes))

    def getstripe(self, path):
        count, size, pool, osts = self._fs.getstripe(_b(path))
        return {"stripe_count": count, "stripe_size": size, "pool": pool, "osts": osts}


def connect(mount):
    """Connects to the node's client serving the mount at ``mount``."""
    return Nacre(mount)
