//! CUDA, loaded at run time: the driver API from `libcuda.so.1` (cuda.h, `_v2` entry points, CUDA 11–13), else
//! the runtime API from `libcudart` (cuda_runtime_api.h); the few calls one rank needs, as safe methods.

use crate::decls::{
    CuDevicePtr, FnCuCtxSetCurrent, FnCuDeviceGet, FnCuDeviceGetCount, FnCuGetErrorString,
    FnCuInit, FnCuMemAlloc, FnCuMemcpyDtoH, FnCuMemcpyHtoD, FnCuPrimaryCtxRetain, FnCuStreamCreate,
    FnCuStreamSynchronize, FnCudaGetDeviceCount, FnCudaGetErrorString, FnCudaMalloc, FnCudaMemcpy,
    FnCudaSetDevice, FnCudaStreamCreate, FnCudaStreamSynchronize, CUDA_OK, DEVICE_TO_HOST,
    HOST_TO_DEVICE, INSUFFICIENT_DRIVER, NO_DEVICE,
};
use crate::ffi;
use crate::libsearch;
use libloading::Library;
use ncclenv::check::protocol::{CudaApi, HelperError, HelperMsg, LibKind, LibMsg, Stage};
use std::ffi::{c_char, c_int, c_void};

/// `CUresult` / `cudaError_t` (both C enums of `int` size; see `decls.rs`).
type CuRes = c_int;

/// The entry points of one flavour.
enum Api {
    Driver {
        init: FnCuInit,
        count: FnCuDeviceGetCount,
        get: FnCuDeviceGet,
        retain: FnCuPrimaryCtxRetain,
        set_current: FnCuCtxSetCurrent,
        alloc: FnCuMemAlloc,
        htod: FnCuMemcpyHtoD,
        dtoh: FnCuMemcpyDtoH,
        stream_create: FnCuStreamCreate,
        stream_sync: FnCuStreamSynchronize,
        err_str: Option<FnCuGetErrorString>,
    },
    Runtime {
        count: FnCudaGetDeviceCount,
        set_device: FnCudaSetDevice,
        malloc: FnCudaMalloc,
        memcpy: FnCudaMemcpy,
        stream_create: FnCudaStreamCreate,
        stream_sync: FnCudaStreamSynchronize,
        err_str: Option<FnCudaGetErrorString>,
    },
}

/// A loaded CUDA library.
pub struct Cuda {
    /// Never unloaded (CUDA keeps threads too).
    _lib: std::mem::ManuallyDrop<Library>,
    /// The file loaded.
    pub path: String,
    api: Api,
}

/// Outcome of counting GPUs.
pub enum Count {
    /// This many GPUs are visible.
    Gpus(u32),
    /// None is: why.
    NoGpu(String),
}

/// A CUDA stream (never destroyed: the process ends with `_exit`).
pub struct Stream(*mut c_void);

impl Stream {
    /// The `cudaStream_t`/`CUstream` for NCCL.
    pub fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}

/// Device memory of `bytes` bytes (never freed: the process ends with `_exit`).
pub struct DeviceBuffer {
    ptr: *mut c_void,
    bytes: usize,
}

impl DeviceBuffer {
    /// Its device address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Look up the driver API's entry points in `lib`.
///
/// # Safety
/// `lib` must be a CUDA driver library, whose symbols have the signatures of cuda.h.
unsafe fn driver(lib: &Library) -> Option<Api> {
    // SAFETY: the caller guarantees the signatures; the library is never unloaded.
    unsafe {
        Some(Api::Driver {
            init: ffi::sym(lib, "cuInit")?,
            count: ffi::sym(lib, "cuDeviceGetCount")?,
            get: ffi::sym(lib, "cuDeviceGet")?,
            retain: ffi::sym(lib, "cuDevicePrimaryCtxRetain")?,
            set_current: ffi::sym(lib, "cuCtxSetCurrent")?,
            alloc: ffi::sym(lib, "cuMemAlloc_v2")?,
            htod: ffi::sym(lib, "cuMemcpyHtoD_v2")?,
            dtoh: ffi::sym(lib, "cuMemcpyDtoH_v2")?,
            stream_create: ffi::sym(lib, "cuStreamCreate")?,
            stream_sync: ffi::sym(lib, "cuStreamSynchronize")?,
            err_str: ffi::sym(lib, "cuGetErrorString"),
        })
    }
}

/// Look up the runtime API's entry points in `lib`.
///
/// # Safety
/// `lib` must be a CUDA runtime library, whose symbols have the signatures of cuda_runtime_api.h.
unsafe fn runtime(lib: &Library) -> Option<Api> {
    // SAFETY: the caller guarantees the signatures; the library is never unloaded.
    unsafe {
        Some(Api::Runtime {
            count: ffi::sym(lib, "cudaGetDeviceCount")?,
            set_device: ffi::sym(lib, "cudaSetDevice")?,
            malloc: ffi::sym(lib, "cudaMalloc")?,
            memcpy: ffi::sym(lib, "cudaMemcpy")?,
            stream_create: ffi::sym(lib, "cudaStreamCreate")?,
            stream_sync: ffi::sym(lib, "cudaStreamSynchronize")?,
            err_str: ffi::sym(lib, "cudaGetErrorString"),
        })
    }
}

impl Cuda {
    /// Find and load a CUDA library ([`libsearch::cuda_candidates`]); on failure, the places looked.
    pub fn load() -> Result<Cuda, Vec<String>> {
        let (lib, path) = libsearch::load_first(libsearch::cuda_candidates(), |lib| {
            if ffi::has(lib, "cuInit") || ffi::has(lib, "cudaGetDeviceCount") {
                Ok(())
            } else {
                Err("has neither cuInit nor cudaGetDeviceCount".into())
            }
        })?;
        // SAFETY: a library exporting cuInit (cudaGetDeviceCount) is CUDA's driver (runtime) library, whose
        // entry points have the signatures of cuda.h (cuda_runtime_api.h), CUDA 11–13.
        let api = unsafe { driver(&lib).or_else(|| runtime(&lib)) };
        let Some(api) = api else {
            return Err(vec![format!(
                "{path}: missing CUDA driver or runtime symbols (cuMemAlloc_v2… / cudaMalloc…)"
            )]);
        };
        Ok(Cuda {
            _lib: std::mem::ManuallyDrop::new(lib),
            path,
            api,
        })
    }

    /// The flavour loaded.
    pub fn api(&self) -> CudaApi {
        match self.api {
            Api::Driver { .. } => CudaApi::Driver,
            Api::Runtime { .. } => CudaApi::Runtime,
        }
    }

    /// The `lib` message for it.
    pub fn lib_msg(&self) -> HelperMsg {
        HelperMsg::Lib(LibMsg {
            rank: None,
            what: LibKind::Cuda,
            path: self.path.clone(),
            nccl_version: None,
            cuda: Some(self.api()),
        })
    }

    /// A CUDA failure: `what` returned `code`, with CUDA's error string.
    fn err(&self, what: &str, code: CuRes) -> HelperError {
        let error_string = match &self.api {
            Api::Driver {
                err_str: Some(f), ..
            } => {
                let mut p: *const c_char = std::ptr::null();
                // SAFETY: cuGetErrorString writes a pointer to a static string (or leaves NULL).
                unsafe {
                    f(code, &mut p);
                    ffi::cstr(p)
                }
            }
            // SAFETY: cudaGetErrorString returns a static string for any code.
            Api::Runtime {
                err_str: Some(f), ..
            } => unsafe { ffi::cstr(f(code)) },
            _ => None,
        };
        HelperError {
            code: Some(code),
            error_string,
            ..HelperError::new(Stage::Cuda, format!("{what} returned {code}"))
        }
    }

    /// `what` returned `rc`, which means that no GPU is visible: the reason, with CUDA's name and text.
    fn no_gpu(&self, what: &str, rc: CuRes) -> Count {
        let name = match (&self.api, rc) {
            (Api::Driver { .. }, NO_DEVICE) => "CUDA_ERROR_NO_DEVICE",
            (_, NO_DEVICE) => "cudaErrorNoDevice",
            (_, INSUFFICIENT_DRIVER) => "cudaErrorInsufficientDriver",
            _ => "error",
        };
        let text = self
            .err(what, rc)
            .error_string
            .map(|t| format!(": {t}"))
            .unwrap_or_default();
        let why = if rc == INSUFFICIENT_DRIVER {
            " (no CUDA driver, libcuda.so.1, is usable here)"
        } else {
            ""
        };
        Count::NoGpu(format!("{what} returned {name} ({rc}){text}{why}"))
    }

    /// Number of visible GPUs; `CUDA_ERROR_NO_DEVICE` (100) and, for the runtime without a driver,
    /// `cudaErrorInsufficientDriver` (35) mean no GPU.
    pub fn count(&self) -> Result<Count, HelperError> {
        let mut devices: c_int = 0;
        match &self.api {
            Api::Driver { init, count, .. } => {
                // SAFETY: cuInit takes flags (0).
                let rc = unsafe { init(0) };
                if rc == NO_DEVICE {
                    return Ok(self.no_gpu("cuInit", rc));
                }
                if rc != CUDA_OK {
                    return Err(self.err("cuInit", rc));
                }
                // SAFETY: cuDeviceGetCount writes one int to the pointer given.
                let rc = unsafe { count(&mut devices) };
                if rc != CUDA_OK {
                    return Err(self.err("cuDeviceGetCount", rc));
                }
            }
            Api::Runtime { count, .. } => {
                // SAFETY: cudaGetDeviceCount writes one int to the pointer given.
                let rc = unsafe { count(&mut devices) };
                if rc == NO_DEVICE || rc == INSUFFICIENT_DRIVER {
                    return Ok(self.no_gpu("cudaGetDeviceCount", rc));
                }
                if rc != CUDA_OK {
                    return Err(self.err("cudaGetDeviceCount", rc));
                }
            }
        }
        if devices <= 0 {
            Ok(Count::NoGpu("CUDA sees 0 devices".into()))
        } else {
            Ok(Count::Gpus(u32::try_from(devices).unwrap_or(0)))
        }
    }

    /// Make device `dev` current to this thread (driver: its primary context; runtime: `cudaSetDevice`) and
    /// create a stream on it.
    pub fn select(&self, dev: u32) -> Result<Stream, HelperError> {
        let dev = c_int::try_from(dev).unwrap_or(c_int::MAX);
        let mut stream: *mut c_void = std::ptr::null_mut();
        match &self.api {
            Api::Driver {
                get,
                retain,
                set_current,
                stream_create,
                ..
            } => {
                let mut d: c_int = 0;
                // SAFETY: cuDeviceGet writes one device handle to the pointer given.
                let rc = unsafe { get(&mut d, dev) };
                if rc != CUDA_OK {
                    return Err(self.err("cuDeviceGet", rc));
                }
                let mut ctx: *mut c_void = std::ptr::null_mut();
                // SAFETY: cuDevicePrimaryCtxRetain writes the context to the pointer given.
                let rc = unsafe { retain(&mut ctx, d) };
                if rc != CUDA_OK {
                    return Err(self.err("cuDevicePrimaryCtxRetain", rc));
                }
                // SAFETY: ctx came from cuDevicePrimaryCtxRetain.
                let rc = unsafe { set_current(ctx) };
                if rc != CUDA_OK {
                    return Err(self.err("cuCtxSetCurrent", rc));
                }
                // SAFETY: cuStreamCreate writes the stream to the pointer given.
                let rc = unsafe { stream_create(&mut stream, 0) };
                if rc != CUDA_OK {
                    return Err(self.err("cuStreamCreate", rc));
                }
            }
            Api::Runtime {
                set_device,
                stream_create,
                ..
            } => {
                // SAFETY: cudaSetDevice takes a device number.
                let rc = unsafe { set_device(dev) };
                if rc != CUDA_OK {
                    return Err(self.err("cudaSetDevice", rc));
                }
                // SAFETY: cudaStreamCreate writes the stream to the pointer given.
                let rc = unsafe { stream_create(&mut stream) };
                if rc != CUDA_OK {
                    return Err(self.err("cudaStreamCreate", rc));
                }
            }
        }
        Ok(Stream(stream))
    }

    /// Allocate `bytes` bytes on the current device.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, HelperError> {
        let ptr = match &self.api {
            Api::Driver { alloc, .. } => {
                let mut p: CuDevicePtr = 0;
                // SAFETY: cuMemAlloc_v2 writes the device address to the pointer given.
                let rc = unsafe { alloc(&mut p, bytes) };
                if rc != CUDA_OK {
                    return Err(self.err("cuMemAlloc", rc));
                }
                p as usize as *mut c_void
            }
            Api::Runtime { malloc, .. } => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: cudaMalloc writes the device address to the pointer given.
                let rc = unsafe { malloc(&mut p, bytes) };
                if rc != CUDA_OK {
                    return Err(self.err("cudaMalloc", rc));
                }
                p
            }
        };
        Ok(DeviceBuffer { ptr, bytes })
    }

    /// Copy `src` to the start of `dst`.
    pub fn to_device(&self, dst: &DeviceBuffer, src: &[f32]) -> Result<(), HelperError> {
        let bytes = std::mem::size_of_val(src);
        if bytes > dst.bytes {
            return Err(HelperError::new(
                Stage::Cuda,
                "memcpy host→device: more bytes than the device buffer holds",
            ));
        }
        let from = src.as_ptr() as *const c_void;
        // SAFETY: dst holds at least `bytes` bytes (checked above) on the current device; src is a live slice.
        let rc = unsafe {
            match &self.api {
                Api::Driver { htod, .. } => htod(dst.ptr as usize as CuDevicePtr, from, bytes),
                Api::Runtime { memcpy, .. } => memcpy(dst.ptr, from, bytes, HOST_TO_DEVICE),
            }
        };
        if rc != CUDA_OK {
            return Err(self.err("memcpy host→device", rc));
        }
        Ok(())
    }

    /// Copy the start of `src` into `dst` (a failure is reported at stage `verify`).
    pub fn to_host(&self, dst: &mut [f32], src: &DeviceBuffer) -> Result<(), HelperError> {
        let bytes = std::mem::size_of_val(dst);
        if bytes > src.bytes {
            return Err(HelperError::new(
                Stage::Verify,
                "memcpy device→host: more bytes than the device buffer holds",
            ));
        }
        let to = dst.as_mut_ptr() as *mut c_void;
        // SAFETY: src holds at least `bytes` bytes (checked above); dst is a live mutable slice.
        let rc = unsafe {
            match &self.api {
                Api::Driver { dtoh, .. } => dtoh(to, src.ptr as usize as CuDevicePtr, bytes),
                Api::Runtime { memcpy, .. } => memcpy(to, src.ptr, bytes, DEVICE_TO_HOST),
            }
        };
        if rc != CUDA_OK {
            let mut e = self.err("memcpy device→host", rc);
            e.stage = Stage::Verify;
            return Err(e);
        }
        Ok(())
    }

    /// Wait for everything queued on `stream` (a failure is reported at stage `collective`).
    pub fn sync(&self, stream: &Stream) -> Result<(), HelperError> {
        // SAFETY: the stream came from this library's stream_create.
        let rc = unsafe {
            match &self.api {
                Api::Driver { stream_sync, .. } => stream_sync(stream.0),
                Api::Runtime { stream_sync, .. } => stream_sync(stream.0),
            }
        };
        if rc != CUDA_OK {
            let mut e = self.err("stream synchronize", rc);
            e.stage = Stage::Collective;
            return Err(e);
        }
        Ok(())
    }
}
