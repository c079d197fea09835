//! `nacre._nacre`: the node's client API for Python (docs/api.md), a pyo3 module over
//! `nacre-api`. Reads go straight into the memory of a writable buffer-protocol object
//! (bytearray, memoryview, numpy array) and writes leave from the memory of any one, with the
//! GIL released while the node's client works. The file objects `open()` returns, as the
//! builtin `open` gives, are in `python/nacre/__init__.py`; maturin builds the `nacre` wheel
//! (pyproject.toml).

use nacre_api::{Error, File, Node, Stat};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn os_error(e: Error) -> PyErr {
    let errno = e.errno();
    // OSError(errno, text) is made the matching subclass (FileNotFoundError, ...).
    PyOSError::new_err((errno, std::io::Error::from_raw_os_error(errno).to_string()))
}

/// A contiguous byte view of `buf` (a `memoryview(...).cast("B")` from the wrapper).
fn contiguous(buf: &PyBuffer<u8>) -> PyResult<(usize, usize)> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("the buffer must be contiguous"));
    }
    Ok((buf.buf_ptr() as usize, buf.len_bytes()))
}

type StatTuple = (
    u32,
    u64,
    u32,
    u32,
    u32,
    u64,
    (i64, u32),
    (i64, u32),
    (i64, u32),
    u64,
);

fn stat_tuple(s: &Stat) -> StatTuple {
    (
        s.mode, s.ino, s.nlink, s.uid, s.gid, s.size, s.atime, s.mtime, s.ctime, s.blocks,
    )
}

/// A connection to the node's client of one mount.
#[pyclass(frozen, module = "nacre._nacre")]
struct Fs {
    node: Node,
}

#[pymethods]
impl Fs {
    /// Connects to the node's client serving the mount at `mount` (or any path in it).
    #[new]
    fn new(py: Python<'_>, mount: std::path::PathBuf) -> PyResult<Fs> {
        let node = py
            .allow_threads(|| Node::connect(&mount))
            .map_err(os_error)?;
        Ok(Fs { node })
    }

    /// The file system's name.
    #[getter]
    fn fsname(&self) -> String {
        self.node.fsname()
    }

    /// Opens `path` with open(2) flags; returns a raw file.
    fn open(&self, py: Python<'_>, path: Vec<u8>, flags: i32, mode: u32) -> PyResult<RawFile> {
        let file = py
            .allow_threads(|| self.node.open(&path, flags, mode))
            .map_err(os_error)?;
        Ok(RawFile { file })
    }

    /// (mode, ino, nlink, uid, gid, size, atime, mtime, ctime, blocks) of `path`.
    #[pyo3(signature = (path, follow = true))]
    fn stat(&self, py: Python<'_>, path: Vec<u8>, follow: bool) -> PyResult<StatTuple> {
        let s = py
            .allow_threads(|| {
                if follow {
                    self.node.stat(&path)
                } else {
                    self.node.lstat(&path)
                }
            })
            .map_err(os_error)?;
        Ok(stat_tuple(&s))
    }

    /// The entries of directory `path`: (name, inode, type bits).
    fn listdir<'py>(
        &self,
        py: Python<'py>,
        path: Vec<u8>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, u64, u32)>> {
        let entries = py
            .allow_threads(|| self.node.readdir(&path))
            .map_err(os_error)?;
        Ok(entries
            .into_iter()
            .map(|e| (PyBytes::new(py, &e.name), e.ino, e.kind))
            .collect())
    }

    /// Makes directory `path`.
    fn mkdir(&self, py: Python<'_>, path: Vec<u8>, mode: u32) -> PyResult<()> {
        py.allow_threads(|| self.node.mkdir(&path, mode))
            .map_err(os_error)
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: Vec<u8>) -> PyResult<()> {
        py.allow_threads(|| self.node.rmdir(&path))
            .map_err(os_error)
    }

    /// Removes the name `path`.
    fn unlink(&self, py: Python<'_>, path: Vec<u8>) -> PyResult<()> {
        py.allow_threads(|| self.node.unlink(&path))
            .map_err(os_error)
    }

    /// Renames `src` to `dst`.
    fn rename(&self, py: Python<'_>, src: Vec<u8>, dst: Vec<u8>) -> PyResult<()> {
        py.allow_threads(|| self.node.rename(&src, &dst))
            .map_err(os_error)
    }

    /// Makes `dst` a hard link to `src`.
    fn link(&self, py: Python<'_>, src: Vec<u8>, dst: Vec<u8>) -> PyResult<()> {
        py.allow_threads(|| self.node.link(&src, &dst))
            .map_err(os_error)
    }

    /// Makes `path` a symbolic link holding `target`.
    fn symlink(&self, py: Python<'_>, target: Vec<u8>, path: Vec<u8>) -> PyResult<()> {
        py.allow_threads(|| self.node.symlink(&target, &path))
            .map_err(os_error)
    }

    /// What the symbolic link `path` holds.
    fn readlink<'py>(&self, py: Python<'py>, path: Vec<u8>) -> PyResult<Bound<'py, PyBytes>> {
        let t = py
            .allow_threads(|| self.node.readlink(&path))
            .map_err(os_error)?;
        Ok(PyBytes::new(py, &t))
    }

    /// Creates the empty file `path` with a layout (0: defaults; count -1: every OST).
    fn setstripe(
        &self,
        py: Python<'_>,
        path: Vec<u8>,
        count: i64,
        size: u64,
        pool: Option<String>,
        mode: u32,
    ) -> PyResult<()> {
        let count = if count < 0 { u32::MAX } else { count as u32 };
        py.allow_threads(|| {
            self.node
                .setstripe(&path, count, size, pool.as_deref(), mode)
        })
        .map_err(os_error)
    }

    /// A ring of `entries` (a power of two) with `buffer_bytes` of buffers.
    fn ring(&self, py: Python<'_>, entries: u32, buffer_bytes: u64) -> PyResult<Ring> {
        let ring = py
            .allow_threads(|| self.node.ring(entries, buffer_bytes))
            .map_err(os_error)?;
        Ok(Ring {
            ring: std::sync::Mutex::new(ring),
            len: buffer_bytes as usize,
        })
    }

    /// (count, size, pool, OSTs) of the regular file `path`.
    fn getstripe(&self, py: Python<'_>, path: Vec<u8>) -> PyResult<(u32, u64, String, Vec<u32>)> {
        let s = py
            .allow_threads(|| self.node.getstripe(&path))
            .map_err(os_error)?;
        Ok((s.count, s.size, s.pool, s.osts))
    }
}

/// An open file, without a position of its own (the wrapper keeps it).
#[pyclass(frozen, module = "nacre._nacre")]
struct RawFile {
    file: File,
}

#[pymethods]
impl RawFile {
    /// Reads into the writable buffer `buf` at `offset`: the count read.
    fn pread_into(&self, py: Python<'_>, buf: PyBuffer<u8>, offset: u64) -> PyResult<usize> {
        if buf.readonly() {
            return Err(PyValueError::new_err("the buffer is read-only"));
        }
        let (ptr, len) = contiguous(&buf)?;
        py.allow_threads(|| {
            // SAFETY: the buffer is held (exported) for this call, writable and contiguous
            // over `len` bytes; as with readinto(), the caller must not use it meanwhile.
            let b = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
            self.file.read_at(b, offset)
        })
        .map_err(os_error)
    }

    /// Writes the buffer `buf` at `offset`: the count written.
    fn pwrite(&self, py: Python<'_>, buf: PyBuffer<u8>, offset: u64) -> PyResult<usize> {
        let (ptr, len) = contiguous(&buf)?;
        py.allow_threads(|| {
            // SAFETY: the buffer is held for this call and contiguous over `len` bytes.
            let b = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            self.file.write_at(b, offset)
        })
        .map_err(os_error)
    }

    /// Makes what was written durable.
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.file.fsync()).map_err(os_error)
    }

    /// Sets the size.
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        py.allow_threads(|| self.file.set_len(size))
            .map_err(os_error)
    }

    /// The attributes (as `Fs.stat`).
    fn fstat(&self, py: Python<'_>) -> PyResult<StatTuple> {
        let s = py.allow_threads(|| self.file.stat()).map_err(os_error)?;
        Ok(stat_tuple(&s))
    }

    /// Closes the file at the node's client (again: nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.file.close_shared())
            .map_err(os_error)
    }
}

/// A ring (docs/api.md): requests queued with `prep_*`, published as one batch by
/// `submit`, their completions taken by `wait`. `memoryview(ring)` is its buffers, shared
/// with the node's client. One thread at a time uses a ring.
#[pyclass(frozen, module = "nacre._nacre")]
struct Ring {
    ring: std::sync::Mutex<nacre_api::Ring>,
    len: usize,
}

impl Ring {
    fn lock(&self) -> std::sync::MutexGuard<'_, nacre_api::Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl Ring {
    /// Entries: the most requests in flight.
    #[getter]
    fn entries(&self) -> u32 {
        self.lock().entries()
    }

    /// Requests submitted and not yet completed.
    #[getter]
    fn in_flight(&self) -> u32 {
        self.lock().in_flight()
    }

    /// Queues a read of `length` bytes of `file` at `offset` into the buffers at
    /// `buf_offset`.
    fn prep_read(
        &self,
        file: &RawFile,
        offset: u64,
        buf_offset: u64,
        length: u32,
        user_data: u64,
    ) -> PyResult<()> {
        self.lock()
            .prep_read(&file.file, offset, buf_offset, length, user_data)
            .map_err(os_error)
    }

    /// Queues a write of `length` bytes from the buffers at `buf_offset` to `file` at
    /// `offset`.
    fn prep_write(
        &self,
        file: &RawFile,
        offset: u64,
        buf_offset: u64,
        length: u32,
        user_data: u64,
    ) -> PyResult<()> {
        self.lock()
            .prep_write(&file.file, offset, buf_offset, length, user_data)
            .map_err(os_error)
    }

    /// Queues an fsync of `file`.
    fn prep_fsync(&self, file: &RawFile, user_data: u64) -> PyResult<()> {
        self.lock()
            .prep_fsync(&file.file, user_data)
            .map_err(os_error)
    }

    /// Publishes the queued requests as one batch: how many.
    fn submit(&self) -> usize {
        self.lock().submit()
    }

    /// Completions as (user_data, result) pairs, at least `min` of them (fewer if fewer are
    /// in flight, or when `timeout` seconds pass).
    #[pyo3(signature = (min = 1, timeout = None))]
    fn wait(&self, py: Python<'_>, min: usize, timeout: Option<f64>) -> PyResult<Vec<(u64, i64)>> {
        let timeout = timeout.map(|t| std::time::Duration::from_secs_f64(t.max(0.0)));
        let mut out = Vec::new();
        py.allow_threads(|| self.lock().wait(min, &mut out, timeout))
            .map_err(os_error)?;
        Ok(out.into_iter().map(|c| (c.user_data, c.result)).collect())
    }

    /// The buffer protocol: the ring's buffers, writable, kept alive with the ring.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        let (ptr, len) = {
            let r = slf.get();
            (r.lock().buffers_ptr(), r.len)
        };
        // SAFETY: `view` is the interpreter's; the memory lives as long as the ring, which
        // the view holds a reference to.
        let rc = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr.cast(),
                len as pyo3::ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}
}

/// The module.
#[pymodule]
fn _nacre(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Fs>()?;
    m.add_class::<RawFile>()?;
    m.add_class::<Ring>()?;
    m.add("API_VERSION", nacre_api::VERSION)?;
    Ok(())
}
