"""The `nacre` Python package on a mount given by NACRE_MOUNT (run by tests/python.rs on
the networked form): data, numpy.save and a torch.save-style zip checkpoint straight into
Nacre, zero-copy reads into buffer-protocol objects, the namespace, striping, errors."""

import hashlib
import io
import os
import pickle
import random
import threading
import unittest
import zipfile

import numpy

import nacre

MNT = os.environ["NACRE_MOUNT"]


class NacreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fs = nacre.connect(MNT)
        cls.fs.makedirs("py", exist_ok=True)

    def test_connect_names_the_file_system(self):
        self.assertEqual(self.fs.fsname, os.environ["NACRE_FSNAME"])
        self.assertEqual(nacre.API_VERSION, 1)

    def test_data_in_odd_pieces_matches_through_the_mount(self):
        rng = random.Random(7)
        data = rng.randbytes(8 << 20)
        with self.fs.open("py/odd", "wb") as f:
            at = 0
            while at < len(data):
                n = rng.randint(1, 3 << 20)
                f.write(data[at:at + n])
                at += n
        with open(os.path.join(MNT, "py/odd"), "rb") as k:
            self.assertEqual(hashlib.sha256(k.read()).digest(), hashlib.sha256(data).digest())
        with self.fs.open("py/odd", "rb") as f:
            self.assertEqual(f.read(), data)
            f.seek(-5, io.SEEK_END)
            self.assertEqual(f.read(), data[-5:])

    def test_reads_land_in_the_callers_buffers(self):
        data = bytes(range(256)) * 4096
        with self.fs.open("py/buf", "wb") as f:
            f.write(memoryview(data))
        with self.fs.open("py/buf", "rb", buffering=0) as raw:
            ba = bytearray(1000)
            self.assertEqual(raw.readinto(ba), 1000)
            self.assertEqual(bytes(ba), data[:1000])
            arr = numpy.zeros(4096, dtype=numpy.uint32)
            before = arr.ctypes.data
            self.assertEqual(raw.pread_into(arr, 4096), 4096 * 4)
            self.assertEqual(arr.ctypes.data, before, "the same memory, filled in place")
            self.assertEqual(arr.tobytes(), data[4096:4096 + 16384])
            view = memoryview(bytearray(300))[100:]
            self.assertEqual(raw.pread_into(view, 10), 200)
            self.assertEqual(bytes(view), data[10:210])
            self.assertEqual(raw.pread(10, len(data) - 4), data[-4:], "short at the end")

    def test_numpy_save_and_load_straight_into_nacre(self):
        weights = numpy.random.default_rng(3).standard_normal((512, 1024))
        self.fs.setstripe("py/weights.npy", count=2, size=1 << 20)
        with self.fs.open("py/weights.npy", "r+b") as f:
            numpy.save(f, weights)
        with self.fs.open("py/weights.npy", "rb") as f:
            back = numpy.load(f)
        self.assertTrue(numpy.array_equal(back, weights))
        through_mount = numpy.load(os.path.join(MNT, "py/weights.npy"))
        self.assertTrue(numpy.array_equal(through_mount, weights))
        self.assertEqual(self.fs.getstripe("py/weights.npy")["stripe_count"], 2)

    def test_a_torch_save_style_zip_checkpoint(self):
        # torch.save writes a zip archive of pickles through a seekable file object.
        state = {"step": 1000, "lr": 3e-4, "layers": [list(range(100))] * 8}
        tensor = numpy.arange(1 << 18, dtype=numpy.float32)
        with self.fs.open("py/ckpt.pt", "wb") as f:
            with zipfile.ZipFile(f, "w") as z:
                z.writestr("archive/data.pkl", pickle.dumps(state))
                z.writestr("archive/data/0", tensor.tobytes())
        for opener in (lambda: self.fs.open("py/ckpt.pt", "rb"),
                       lambda: open(os.path.join(MNT, "py/ckpt.pt"), "rb")):
            with opener() as f, zipfile.ZipFile(f) as z:
                self.assertEqual(pickle.loads(z.read("archive/data.pkl")), state)
                got = numpy.frombuffer(z.read("archive/data/0"), dtype=numpy.float32)
                self.assertTrue(numpy.array_equal(got, tensor))

    def test_text_append_and_exclusive_modes(self):
        with self.fs.open("py/log.txt", "w") as f:
            f.write("one\n")
        with self.fs.open("py/log.txt", "a") as f:
            f.write("two\n")
        with self.fs.open("py/log.txt") as f:
            self.assertEqual(f.readlines(), ["one\n", "two\n"])
        with self.assertRaises(FileExistsError):
            self.fs.open("py/log.txt", "x")
        with self.assertRaises(ValueError):
            self.fs.open("py/log.txt", "rw")

    def test_threads_write_at_once_through_one_file(self):
        chunk = 1 << 20
        with self.fs.open("py/threads", "wb", buffering=0) as raw:
            def work(t):
                for c in range(4):
                    off = (c * 4 + t) * chunk
                    raw.pwrite(bytes([(off // chunk) % 251]) * chunk, off)
            threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            raw.fsync()
        with open(os.path.join(MNT, "py/threads"), "rb") as k:
            for i in range(16):
                self.assertEqual(k.read(chunk), bytes([i % 251]) * chunk)

    def test_a_ring_batches_requests_from_one_thread(self):
        chunk = 1 << 20
        data = numpy.random.default_rng(9).integers(0, 255, 16 * chunk, dtype=numpy.uint8)
        ring = self.fs.ring(16, 16 * chunk)
        buffers = ring.buffers()
        buffers[:] = data.tobytes()
        with self.fs.open("py/ring", "w+b", buffering=0) as f:
            for i in range(16):
                ring.prep_write(f, i * chunk, i * chunk, chunk, i)
            self.assertEqual(ring.submit(), 16)
            done = ring.wait(16)
            self.assertEqual(sorted(u for u, _ in done), list(range(16)))
            self.assertTrue(all(r == chunk for _, r in done))
            ring.prep_fsync(f, 99)
            ring.submit()
            self.assertEqual(ring.wait(1), [(99, 0)])
            buffers[:] = bytes(16 * chunk)
            # Reads at random offsets, 16 in flight, landing in the ring's buffers.
            rng = random.Random(4)
            offsets = {}
            for slot in range(16):
                offsets[slot] = rng.randrange(0, 16 * chunk - 4096)
                ring.prep_read(f, offsets[slot], slot * 4096, 4096, slot)
            ring.submit()
            for slot, result in ring.wait(16):
                self.assertEqual(result, 4096)
                got = bytes(buffers[slot * 4096:(slot + 1) * 4096])
                self.assertEqual(got, data[offsets[slot]:offsets[slot] + 4096].tobytes())
        with open(os.path.join(MNT, "py/ring"), "rb") as k:
            self.assertEqual(k.read(), data.tobytes())

    def test_the_namespace_and_its_errors(self):
        fs = self.fs
        fs.makedirs("py/ns/a/b")
        with fs.open("py/ns/a/f", "wb") as f:
            f.write(b"x" * 10)
        self.assertEqual(sorted(fs.listdir("py/ns/a")), ["b", "f"])
        self.assertEqual(fs.stat("py/ns/a/f").st_size, 10)
        self.assertTrue(fs.isdir("py/ns/a/b"))
        fs.rename("py/ns/a/f", "py/ns/g")
        fs.link("py/ns/g", "py/ns/h")
        self.assertEqual(fs.stat("py/ns/h").st_nlink, 2)
        fs.symlink("g", "py/ns/s")
        self.assertEqual(fs.readlink("py/ns/s"), "g")
        self.assertEqual(fs.stat("py/ns/s").st_ino, fs.stat("py/ns/g").st_ino)
        self.assertEqual(fs.stat("py/ns/g").st_ino, os.stat(os.path.join(MNT, "py/ns/g")).st_ino)
        with self.assertRaises(FileNotFoundError):
            fs.stat("py/ns/none")
        with self.assertRaises(FileExistsError):
            fs.mkdir("py/ns/a")
        with self.assertRaises(IsADirectoryError):
            fs.open("py/ns/a", "rb")
        with self.assertRaises(NotADirectoryError):
            fs.stat("py/ns/g/x")
        with self.assertRaises(OSError) as e:
            fs.rmdir("py/ns/a")
        self.assertEqual(e.exception.errno, 39)
        for name in ("s", "h", "g"):
            fs.remove(f"py/ns/{name}")
        fs.rmdir("py/ns/a/b")
        fs.rmdir("py/ns/a")
        self.assertFalse(fs.exists("py/ns/a"))
        self.assertFalse(os.path.exists(os.path.join(MNT, "py/ns/a")))


if __name__ == "__main__":
    unittest.main()
