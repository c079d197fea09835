//! The kernel's Linux AIO structures (linux/aio_abi.h; libaio's are the same memory).

/// The kernel's `struct iocb` (linux/aio_abi.h; libaio's is the same memory).
#[repr(C)]
pub struct Iocb {
    pub(crate) data: u64,
    pub(crate) key: u32,
    pub(crate) rw_flags: u32,
    pub(crate) opcode: u16,
    pub(crate) reqprio: i16,
    pub(crate) fildes: u32,
    pub(crate) buf: u64,
    pub(crate) nbytes: u64,
    pub(crate) offset: i64,
    pub(crate) reserved2: u64,
    pub(crate) flags: u32,
    pub(crate) resfd: u32,
}

/// The kernel's `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IoEvent {
    pub(crate) data: u64,
    pub(crate) obj: u64,
    pub(crate) res: i64,
    pub(crate) res2: i64,
}
