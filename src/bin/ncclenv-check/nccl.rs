//! NCCL, loaded at run time: the few functions the check calls (their C signatures, from src/nccl.h.in of
//! NVIDIA/nccl, unchanged 2.18–2.30, are in `decls.rs`, checked against the real nccl.h by
//! tests/it/c_interface.rs), and safe methods around them.

use crate::cuda::{DeviceBuffer, Stream};
pub use crate::decls::UniqueId;
use crate::decls::{
    FnAllReduce, FnCommInitRank, FnGetErrorString, FnGetLastError, FnGetUniqueId, FnGetVersion,
    NcclComm, NCCL_FLOAT32, NCCL_SUCCESS, NCCL_SUM,
};
use crate::ffi;
use crate::libsearch;
use libloading::Library;
use ncclenv::check::protocol::{
    Bootstrap, HelperError, HelperMsg, LibKind, LibMsg, Stage, UNIQUE_ID_BYTES,
};
use std::ffi::{c_int, c_void};

impl UniqueId {
    /// The id from its 128 bytes (`None` for another length).
    pub fn from_bytes(b: &[u8]) -> Option<UniqueId> {
        Some(UniqueId {
            internal: b.try_into().ok()?,
        })
    }

    /// Its bytes in hex (how rank 0 passes it to the other ranks).
    pub fn hex(&self) -> String {
        self.internal.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The bootstrap address NCCL put into it.
    pub fn bootstrap(&self) -> Bootstrap {
        Bootstrap::from_unique_id(&self.internal)
    }
}

/// A loaded libnccl.
pub struct Nccl {
    /// Never unloaded: NCCL's detached bootstrap thread runs its code until the process exits
    /// (dlclose while it runs crashes the helper).
    _lib: std::mem::ManuallyDrop<Library>,
    /// The file loaded.
    pub path: String,
    /// `ncclGetVersion` (0 when it failed).
    pub version: i32,
    get_unique_id: FnGetUniqueId,
    get_error_string: FnGetErrorString,
    get_last_error: Option<FnGetLastError>,
    comm_init_rank: Option<FnCommInitRank>,
    all_reduce: Option<FnAllReduce>,
}

/// The functions the bootstrap check needs; a library without them is not taken.
const REQUIRED: [&str; 3] = ["ncclGetVersion", "ncclGetUniqueId", "ncclGetErrorString"];

impl Nccl {
    /// Find and load libnccl ([`libsearch::nccl_candidates`]), and read its version.
    pub fn load() -> Result<Nccl, HelperError> {
        let (lib, path) = libsearch::load_first(libsearch::nccl_candidates(), |lib| match REQUIRED
            .iter()
            .find(|s| !ffi::has(lib, s))
        {
            Some(s) => Err(format!("loaded but has no symbol {s}")),
            None => Ok(()),
        })
        .map_err(|looked| HelperError {
            looked,
            ..HelperError::new(Stage::Load, "libnccl.so.2 not found (or not loadable)")
        })?;
        // SAFETY: the signatures are NCCL's (src/nccl.h.in); the library is never unloaded.
        let (get_version, get_unique_id, get_error_string) = unsafe {
            (
                ffi::sym::<FnGetVersion>(&lib, "ncclGetVersion"),
                ffi::sym::<FnGetUniqueId>(&lib, "ncclGetUniqueId"),
                ffi::sym::<FnGetErrorString>(&lib, "ncclGetErrorString"),
            )
        };
        let (Some(get_version), Some(get_unique_id), Some(get_error_string)) =
            (get_version, get_unique_id, get_error_string)
        else {
            return Err(HelperError {
                looked: vec![path.clone()],
                ..HelperError::new(
                    Stage::Symbol,
                    format!("{path}: missing ncclGetVersion/ncclGetUniqueId/ncclGetErrorString"),
                )
            });
        };
        let mut version: c_int = 0;
        // SAFETY: ncclGetVersion writes one int to the pointer given.
        if unsafe { get_version(&mut version) } != NCCL_SUCCESS {
            version = 0;
        }
        let path = ffi::origin(get_version as *const c_void, &path);
        // SAFETY: as above.
        let (get_last_error, comm_init_rank, all_reduce) = unsafe {
            (
                ffi::sym::<FnGetLastError>(&lib, "ncclGetLastError"),
                ffi::sym::<FnCommInitRank>(&lib, "ncclCommInitRank"),
                ffi::sym::<FnAllReduce>(&lib, "ncclAllReduce"),
            )
        };
        Ok(Nccl {
            _lib: std::mem::ManuallyDrop::new(lib),
            path,
            version,
            get_unique_id,
            get_error_string,
            get_last_error,
            comm_init_rank,
            all_reduce,
        })
    }

    /// The `lib` message for it.
    pub fn lib_msg(&self) -> HelperMsg {
        HelperMsg::Lib(LibMsg {
            rank: None,
            what: LibKind::Nccl,
            path: self.path.clone(),
            nccl_version: Some(self.version),
            cuda: None,
        })
    }

    /// An NCCL failure at `stage`: `what` returned `code`, with `ncclGetErrorString(code)` and
    /// `ncclGetLastError(NULL)`.
    pub fn error(&self, stage: Stage, code: c_int, what: &str) -> HelperError {
        // SAFETY: ncclGetErrorString returns a static string for any code.
        let error_string = unsafe { ffi::cstr((self.get_error_string)(code)) };
        // SAFETY: ncclGetLastError(NULL) returns a static string (or NULL) about the last failure.
        let last_error = self
            .get_last_error
            .and_then(|f| unsafe { ffi::cstr(f(std::ptr::null_mut())) })
            .filter(|s| !s.is_empty());
        HelperError {
            code: Some(code),
            error_string,
            last_error,
            ..HelperError::new(stage, format!("{what} returned {code}"))
        }
    }

    /// `ncclGetUniqueId`: NCCL's interface search and bind, the id that carries the bootstrap address.
    pub fn unique_id(&self) -> Result<UniqueId, HelperError> {
        let mut id = UniqueId {
            internal: [0u8; UNIQUE_ID_BYTES],
        };
        // SAFETY: id is a writable 128-byte ncclUniqueId.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        if rc != NCCL_SUCCESS {
            return Err(self.error(Stage::Id, rc, "ncclGetUniqueId"));
        }
        Ok(id)
    }

    /// The communicator functions; a library without them fails at stage `symbol`.
    pub fn collectives(&self) -> Result<Collectives<'_>, HelperError> {
        match (self.comm_init_rank, self.all_reduce) {
            (Some(init), Some(all_reduce)) => Ok(Collectives {
                nccl: self,
                init,
                all_reduce,
            }),
            _ => Err(HelperError::new(
                Stage::Symbol,
                format!("{}: no ncclCommInitRank/ncclAllReduce", self.path),
            )),
        }
    }
}

/// `ncclCommInitRank` and `ncclAllReduce` of a loaded libnccl.
pub struct Collectives<'a> {
    nccl: &'a Nccl,
    init: FnCommInitRank,
    all_reduce: FnAllReduce,
}

/// An NCCL communicator (never destroyed: the process ends with `_exit`).
pub struct Comm(NcclComm);

impl Collectives<'_> {
    /// `ncclCommInitRank`: join the communicator of `nranks` ranks bootstrapped by `id` as `rank`; waits for
    /// every rank.
    pub fn init_rank(&self, nranks: u32, id: UniqueId, rank: u32) -> Result<Comm, HelperError> {
        let mut comm: NcclComm = std::ptr::null_mut();
        let (n, r) = (
            c_int::try_from(nranks).unwrap_or(c_int::MAX),
            c_int::try_from(rank).unwrap_or(c_int::MAX),
        );
        // SAFETY: the signature is NCCL's; comm is an out-pointer to a local.
        let rc = unsafe { (self.init)(&mut comm, n, id, r) };
        if rc != NCCL_SUCCESS {
            return Err(self.nccl.error(Stage::Init, rc, "ncclCommInitRank"));
        }
        Ok(Comm(comm))
    }

    /// `ncclAllReduce` of `send` into `recv` (float32, `ncclSum`) on `stream`; queued, not waited for.
    pub fn all_reduce_sum(
        &self,
        comm: &Comm,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        stream: &Stream,
    ) -> Result<(), HelperError> {
        if send.bytes() != recv.bytes() {
            return Err(HelperError::new(
                Stage::Collective,
                "ncclAllReduce: send and receive buffers differ in size",
            ));
        }
        let count = send.bytes() / std::mem::size_of::<f32>();
        // SAFETY: both buffers hold `count` floats on the device current to this thread, made by the same
        // CUDA library as `stream`; comm came from ncclCommInitRank.
        let rc = unsafe {
            (self.all_reduce)(
                send.as_ptr(),
                recv.as_ptr(),
                count,
                NCCL_FLOAT32,
                NCCL_SUM,
                comm.0,
                stream.as_ptr(),
            )
        };
        if rc != NCCL_SUCCESS {
            return Err(self.nccl.error(Stage::Collective, rc, "ncclAllReduce"));
        }
        Ok(())
    }
}
