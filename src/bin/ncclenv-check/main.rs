//! `ncclenv-check`: the dynamically linked helper that proves an environment with the real NCCL library.
//!
//! The static entrypoint cannot `dlopen`; it runs this binary as a child (see `ncclenv::check` for the command
//! line and the JSON-lines protocol on stdout). This process loads libnccl and CUDA with `libloading`; it is
//! always a throwaway process (NCCL caches its interface search, keeps a listening socket and a detached thread).

// Errors carry the full report (codes, texts, places looked); they are made once per process.
#![allow(clippy::result_large_err, clippy::large_enum_variant)]

use libloading::Library;
use ncclenv::check::{decode_unique_id, HelperError, HelperMsg, UNIQUE_ID_BYTES};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Instant;

/// Protocol output: a duplicate of the original stdout (fd 1 is pointed at stderr so NCCL's prints stay out).
static PROTO: OnceLock<Mutex<File>> = OnceLock::new();
static START: OnceLock<Instant> = OnceLock::new();

fn t_ms() -> u64 {
    START
        .get()
        .map(|s| s.elapsed().as_millis() as u64)
        .unwrap_or(0)
}

fn setup_stdout() {
    let _ = START.set(Instant::now());
    // SAFETY: plain fd syscalls on fds 1 and 2; the duplicate is owned by the File from here on.
    unsafe {
        let fd = nix::libc::fcntl(1, nix::libc::F_DUPFD_CLOEXEC, 3);
        if fd >= 0 {
            nix::libc::dup2(2, 1);
            let _ = PROTO.set(Mutex::new(File::from_raw_fd(fd)));
        }
    }
}

/// Write one protocol line (a single write, so lines from several writers never interleave).
fn emit(m: &HelperMsg) {
    let Ok(mut line) = serde_json::to_vec(m) else {
        return;
    };
    line.push(b'\n');
    if let Some(p) = PROTO.get() {
        let mut f = match p.lock() {
            Ok(f) => f,
            Err(e) => e.into_inner(),
        };
        let _ = f.write_all(&line);
    } else {
        let _ = std::io::stdout().write_all(&line);
    }
}

fn step(rank: Option<u32>, s: &str) {
    let mut m = HelperMsg::new("step");
    m.rank = rank;
    m.step = Some(s.to_string());
    m.t_ms = Some(t_ms());
    emit(&m);
}

fn finish(code: i32) -> ! {
    // SAFETY: _exit skips NCCL's and CUDA's destructors, which may block on their detached threads.
    unsafe { nix::libc::_exit(code) }
}

// -----------------------------------------------------------------------------------------------------------
// Finding libraries
// -----------------------------------------------------------------------------------------------------------

/// Match `name` against a pattern with `*` wildcards only.
fn wild(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.len() >= p.len() && rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Expand an absolute path pattern whose components may hold `*`; existing paths only, sorted.
fn glob(pattern: &str) -> Vec<PathBuf> {
    let mut cur = vec![PathBuf::from("/")];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for base in &cur {
            if comp.contains('*') {
                if let Ok(rd) = std::fs::read_dir(base) {
                    let mut names: Vec<String> = rd
                        .filter_map(|e| e.ok())
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| wild(comp, n))
                        .collect();
                    names.sort();
                    next.extend(names.into_iter().map(|n| base.join(n)));
                }
            } else {
                let p = base.join(comp);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        cur = next;
        if cur.is_empty() {
            break;
        }
    }
    cur
}

/// Python package directories to search: `PYTHONPATH` entries, then site/dist-packages of common prefixes.
fn python_dirs() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Some(pp) = std::env::var_os("PYTHONPATH") {
        for p in std::env::split_paths(&pp) {
            if !p.as_os_str().is_empty() {
                out.push(p.display().to_string());
            }
        }
    }
    let mut prefixes: Vec<String> = Vec::new();
    for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(p) = std::env::var(v) {
            if p.starts_with('/') {
                prefixes.push(p);
            }
        }
    }
    if let Ok(h) = std::env::var("HOME") {
        if h.starts_with('/') {
            prefixes.push(format!("{h}/.local"));
            prefixes.push(format!("{h}/.pyenv/versions/*"));
        }
    }
    prefixes.extend(
        [
            "/usr/local",
            "/usr",
            "/opt/conda",
            "/opt/venv",
            "/opt/python/*",
            "/root/.pyenv/versions/*",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    for pre in prefixes {
        for sub in ["site-packages", "dist-packages"] {
            out.push(format!("{pre}/lib/python3*/{sub}"));
        }
    }
    out.push("/usr/lib/python3/dist-packages".to_string());
    // Only folders that exist, each once, so that "places looked" stays readable.
    let mut dirs: Vec<String> = Vec::new();
    for pat in out {
        for d in glob(&pat) {
            let d = d.display().to_string();
            if d != "/" && !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// A library candidate: a name for the loader's search, or a path pattern.
enum Cand {
    Loader(String),
    Pattern(String),
    /// Several patterns reported as one place (`label`) when none exists.
    Any(String, Vec<String>),
}

fn nccl_candidates() -> Vec<Cand> {
    let mut c = Vec::new();
    // An explicit NCCLENV_NCCL_LIB is the only candidate: proving another library than the one the user
    // named would prove nothing about theirs.
    if let Ok(p) = std::env::var("NCCLENV_NCCL_LIB") {
        if !p.is_empty() {
            c.push(Cand::Pattern(p));
            return c;
        }
    }
    c.push(Cand::Loader("libnccl.so.2".into()));
    c.push(Cand::Pattern("/usr/local/cuda*/lib64/libnccl.so.2".into()));
    c.push(Cand::Pattern(
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
    ));
    c.push(Cand::Pattern("/usr/lib64/libnccl.so.2".into()));
    for d in python_dirs() {
        c.push(Cand::Any(
            format!("{d}/{{nvidia/nccl/lib,paddle/libs,torch/lib}}/libnccl.so.2"),
            vec![
                format!("{d}/nvidia/nccl/lib/libnccl.so.2"),
                format!("{d}/paddle/libs/libnccl.so.2"),
                format!("{d}/torch/lib/libnccl.so.2"),
            ],
        ));
    }
    c
}

fn cuda_candidates() -> Vec<Cand> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("NCCLENV_CUDA_LIB") {
        if !p.is_empty() {
            c.push(Cand::Pattern(p));
        }
    }
    c.push(Cand::Loader("libcuda.so.1".into()));
    c.push(Cand::Pattern(
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    ));
    c.push(Cand::Pattern("/usr/lib64/libcuda.so.1".into()));
    c.push(Cand::Pattern("/usr/local/cuda*/compat/libcuda.so.1".into()));
    let dirs = python_dirs();
    for v in ["13", "12", "11.0"] {
        c.push(Cand::Loader(format!("libcudart.so.{v}")));
        c.push(Cand::Pattern(format!(
            "/usr/local/cuda*/lib64/libcudart.so.{v}"
        )));
        for d in &dirs {
            c.push(Cand::Any(
                format!("{d}/{{nvidia/cuda_runtime/lib,torch/lib,paddle/libs}}/libcudart.so.{v}"),
                vec![
                    format!("{d}/nvidia/cuda_runtime/lib/libcudart.so.{v}"),
                    format!("{d}/torch/lib/libcudart.so.{v}"),
                    format!("{d}/paddle/libs/libcudart.so.{v}"),
                ],
            ));
        }
    }
    c
}

/// Load the first candidate that `accept`s; on failure, the places looked.
fn load_first(
    cands: Vec<Cand>,
    accept: impl Fn(&Library) -> Result<(), String>,
) -> Result<(Library, String), Vec<String>> {
    let mut looked = Vec::new();
    for c in cands {
        let (paths, label): (Vec<String>, String) = match &c {
            Cand::Loader(n) => (vec![n.clone()], format!("{n} (loader search)")),
            Cand::Pattern(p) => {
                let found: Vec<String> = glob(p).iter().map(|x| x.display().to_string()).collect();
                if found.is_empty() {
                    looked.push(format!("{p}: not found"));
                    continue;
                }
                (found, p.clone())
            }
            Cand::Any(label, pats) => {
                let found: Vec<String> = pats
                    .iter()
                    .flat_map(|p| glob(p))
                    .map(|x| x.display().to_string())
                    .collect();
                if found.is_empty() {
                    looked.push(format!("{label}: not found"));
                    continue;
                }
                (found, label.clone())
            }
        };
        for path in paths {
            // SAFETY: loading a shared library runs its initialisers; that is the point of this helper,
            // which runs in a throwaway process.
            match unsafe { Library::new(&path) } {
                Ok(lib) => match accept(&lib) {
                    Ok(()) => return Ok((lib, path)),
                    Err(e) => looked.push(format!("{path}: {e}")),
                },
                Err(e) => {
                    let why = std::error::Error::source(&e)
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| e.to_string());
                    looked.push(format!("{label}: {why}"))
                }
            }
        }
    }
    Err(looked)
}

/// The file a symbol was loaded from (`dladdr`), for libraries found by the loader's search.
fn origin(addr: *const c_void, fallback: &str) -> String {
    let mut info = std::mem::MaybeUninit::<nix::libc::Dl_info>::zeroed();
    // SAFETY: dladdr fills the struct; dli_fname points into the loader's tables.
    unsafe {
        if nix::libc::dladdr(addr, info.as_mut_ptr()) != 0 {
            let info = info.assume_init();
            if !info.dli_fname.is_null() {
                if let Ok(s) = CStr::from_ptr(info.dli_fname).to_str() {
                    if s.starts_with('/') {
                        return s.to_string();
                    }
                }
            }
        }
    }
    fallback.to_string()
}

// -----------------------------------------------------------------------------------------------------------
// NCCL
// -----------------------------------------------------------------------------------------------------------

/// `ncclUniqueId`: 128 bytes passed by value (src/nccl.h.in).
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [u8; UNIQUE_ID_BYTES],
}

type NcclComm = *mut c_void;
type FnGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnGetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type FnGetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type FnGetLastError = unsafe extern "C" fn(NcclComm) -> *const c_char;
type FnCommInitRank = unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> c_int;
type FnAllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    *mut c_void,
) -> c_int;

struct Nccl {
    /// Never unloaded: NCCL's detached bootstrap thread runs its code until the process exits
    /// (dlclose while it runs crashes the helper).
    _lib: std::mem::ManuallyDrop<Library>,
    path: String,
    version: i32,
    get_unique_id: FnGetUniqueId,
    get_error_string: FnGetErrorString,
    get_last_error: Option<FnGetLastError>,
    comm_init_rank: Option<FnCommInitRank>,
    all_reduce: Option<FnAllReduce>,
}

/// Copy a symbol's function pointer out of the library.
///
/// # Safety
/// `T` must be the symbol's true C signature.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    lib.get::<T>(name.as_bytes()).ok().map(|s| *s)
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: NCCL and CUDA return NUL-terminated static strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Nccl {
    fn load() -> Result<Nccl, HelperError> {
        let required = ["ncclGetVersion", "ncclGetUniqueId", "ncclGetErrorString"];
        let (lib, path) = load_first(nccl_candidates(), |lib| {
            for s in required {
                // SAFETY: only checks presence.
                if unsafe { lib.get::<*const c_void>(s.as_bytes()) }.is_err() {
                    return Err(format!("loaded but has no symbol {s}"));
                }
            }
            Ok(())
        })
        .map_err(|looked| HelperError {
            stage: "load".into(),
            message: "libnccl.so.2 not found (or not loadable)".into(),
            looked,
            ..Default::default()
        })?;
        // SAFETY: signatures from src/nccl.h.in; presence checked above.
        unsafe {
            let (Some(get_version), Some(get_unique_id), Some(get_error_string)) = (
                sym::<FnGetVersion>(&lib, "ncclGetVersion"),
                sym::<FnGetUniqueId>(&lib, "ncclGetUniqueId"),
                sym::<FnGetErrorString>(&lib, "ncclGetErrorString"),
            ) else {
                return Err(HelperError {
                    stage: "symbol".into(),
                    message: format!(
                        "{path}: missing ncclGetVersion/ncclGetUniqueId/ncclGetErrorString"
                    ),
                    looked: vec![path],
                    ..Default::default()
                });
            };
            let mut v: c_int = 0;
            let rc = get_version(&mut v);
            if rc != 0 {
                v = 0;
            }
            let path = origin(get_version as *const c_void, &path);
            Ok(Nccl {
                get_last_error: sym::<FnGetLastError>(&lib, "ncclGetLastError"),
                comm_init_rank: sym::<FnCommInitRank>(&lib, "ncclCommInitRank"),
                all_reduce: sym::<FnAllReduce>(&lib, "ncclAllReduce"),
                _lib: std::mem::ManuallyDrop::new(lib),
                path,
                version: v,
                get_unique_id,
                get_error_string,
            })
        }
    }

    fn lib_msg(&self) -> HelperMsg {
        let mut m = HelperMsg::new("lib");
        m.what = Some("nccl".into());
        m.path = Some(self.path.clone());
        m.nccl_version = Some(self.version);
        m
    }

    /// An NCCL failure at `stage` with code, error string and `ncclGetLastError(NULL)`.
    fn error(&self, stage: &str, code: c_int, what: &str) -> HelperError {
        // SAFETY: both return static strings (or NULL).
        let es = cstr(unsafe { (self.get_error_string)(code) });
        let le = self
            .get_last_error
            .and_then(|f| cstr(unsafe { f(std::ptr::null_mut()) }))
            .filter(|s| !s.is_empty());
        HelperError {
            stage: stage.into(),
            code: Some(code),
            error_string: es,
            last_error: le,
            message: format!("{what} returned {code}"),
            ..Default::default()
        }
    }

    fn unique_id(&self) -> Result<UniqueId, HelperError> {
        let mut id = UniqueId {
            internal: [0u8; UNIQUE_ID_BYTES],
        };
        // SAFETY: id is a writable 128-byte ncclUniqueId.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        if rc != 0 {
            return Err(self.error("id", rc, "ncclGetUniqueId"));
        }
        Ok(id)
    }
}

fn fill_addr(m: &mut HelperMsg, id: &UniqueId) {
    match decode_unique_id(&id.internal) {
        Ok((a, p)) => {
            m.addr = Some(a.to_string());
            m.port = Some(p);
            m.family = Some(if a.is_ipv4() { "AF_INET" } else { "AF_INET6" }.into());
        }
        Err(f) => m.family = Some(format!("family {f}")),
    }
}

fn error_result(mode: &str, e: HelperError, version: Option<i32>) -> HelperMsg {
    let mut r = HelperMsg::new("result");
    r.mode = Some(mode.into());
    r.ok = Some(false);
    r.nccl_version = version;
    r.error = Some(e);
    r
}

/// The bootstrap check: load libnccl, `ncclGetVersion`, `ncclGetUniqueId`; decode the bound address.
fn bootstrap(note: Option<String>) -> HelperMsg {
    step(None, "load");
    let nccl = match Nccl::load() {
        Ok(n) => n,
        Err(e) => {
            let mut r = error_result("bootstrap", e, None);
            r.note = note;
            return r;
        }
    };
    emit(&nccl.lib_msg());
    step(None, "id");
    let mut r = match nccl.unique_id() {
        Ok(id) => {
            let mut r = HelperMsg::new("result");
            r.ok = Some(true);
            fill_addr(&mut r, &id);
            r
        }
        Err(e) => error_result("bootstrap", e, None),
    };
    r.mode = Some("bootstrap".into());
    r.nccl_version = Some(nccl.version);
    r.path = Some(nccl.path.clone());
    r.note = note;
    r
}

// -----------------------------------------------------------------------------------------------------------
// CUDA (driver API from libcuda.so.1, else the runtime API from libcudart)
// -----------------------------------------------------------------------------------------------------------

type CuRes = c_int;
enum CudaApi {
    Driver {
        init: unsafe extern "C" fn(c_uint) -> CuRes,
        count: unsafe extern "C" fn(*mut c_int) -> CuRes,
        get: unsafe extern "C" fn(*mut c_int, c_int) -> CuRes,
        retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuRes,
        set_current: unsafe extern "C" fn(*mut c_void) -> CuRes,
        alloc: unsafe extern "C" fn(*mut u64, usize) -> CuRes,
        htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuRes,
        dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuRes,
        stream_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuRes,
        stream_sync: unsafe extern "C" fn(*mut c_void) -> CuRes,
        err_str: Option<unsafe extern "C" fn(CuRes, *mut *const c_char) -> CuRes>,
    },
    Runtime {
        count: unsafe extern "C" fn(*mut c_int) -> CuRes,
        set_device: unsafe extern "C" fn(c_int) -> CuRes,
        malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> CuRes,
        memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CuRes,
        stream_create: unsafe extern "C" fn(*mut *mut c_void) -> CuRes,
        stream_sync: unsafe extern "C" fn(*mut c_void) -> CuRes,
        err_str: Option<unsafe extern "C" fn(CuRes) -> *const c_char>,
    },
}

struct Cuda {
    /// Never unloaded (CUDA keeps threads too).
    _lib: std::mem::ManuallyDrop<Library>,
    path: String,
    api: CudaApi,
}

/// Outcome of counting GPUs.
enum Count {
    Gpus(u32),
    NoGpu(String),
}

impl Cuda {
    fn load() -> Result<Cuda, Vec<String>> {
        let (lib, path) = load_first(cuda_candidates(), |lib| {
            // SAFETY: presence checks only.
            let has = |s: &str| unsafe { lib.get::<*const c_void>(s.as_bytes()) }.is_ok();
            if has("cuInit") || has("cudaGetDeviceCount") {
                Ok(())
            } else {
                Err("has neither cuInit nor cudaGetDeviceCount".into())
            }
        })?;
        // SAFETY: signatures from cuda.h / cuda_runtime_api.h (CUDA 11–13, _v2 entry points).
        let api = unsafe {
            if let (
                Some(init),
                Some(count),
                Some(get),
                Some(retain),
                Some(set_current),
                Some(alloc),
                Some(htod),
                Some(dtoh),
                Some(stream_create),
                Some(stream_sync),
            ) = (
                sym(&lib, "cuInit"),
                sym(&lib, "cuDeviceGetCount"),
                sym(&lib, "cuDeviceGet"),
                sym(&lib, "cuDevicePrimaryCtxRetain"),
                sym(&lib, "cuCtxSetCurrent"),
                sym(&lib, "cuMemAlloc_v2"),
                sym(&lib, "cuMemcpyHtoD_v2"),
                sym(&lib, "cuMemcpyDtoH_v2"),
                sym(&lib, "cuStreamCreate"),
                sym(&lib, "cuStreamSynchronize"),
            ) {
                CudaApi::Driver {
                    init,
                    count,
                    get,
                    retain,
                    set_current,
                    alloc,
                    htod,
                    dtoh,
                    stream_create,
                    stream_sync,
                    err_str: sym(&lib, "cuGetErrorString"),
                }
            } else if let (
                Some(count),
                Some(set_device),
                Some(malloc),
                Some(memcpy),
                Some(stream_create),
                Some(stream_sync),
            ) = (
                sym(&lib, "cudaGetDeviceCount"),
                sym(&lib, "cudaSetDevice"),
                sym(&lib, "cudaMalloc"),
                sym(&lib, "cudaMemcpy"),
                sym(&lib, "cudaStreamCreate"),
                sym(&lib, "cudaStreamSynchronize"),
            ) {
                CudaApi::Runtime {
                    count,
                    set_device,
                    malloc,
                    memcpy,
                    stream_create,
                    stream_sync,
                    err_str: sym(&lib, "cudaGetErrorString"),
                }
            } else {
                return Err(vec![format!(
                    "{path}: missing CUDA driver or runtime symbols (cuMemAlloc_v2… / cudaMalloc…)"
                )]);
            }
        };
        Ok(Cuda {
            _lib: std::mem::ManuallyDrop::new(lib),
            path,
            api,
        })
    }

    fn kind(&self) -> &'static str {
        match self.api {
            CudaApi::Driver { .. } => "driver",
            CudaApi::Runtime { .. } => "runtime",
        }
    }

    fn err(&self, what: &str, code: CuRes) -> HelperError {
        // SAFETY: the error-string functions return static strings.
        let es = unsafe {
            match &self.api {
                CudaApi::Driver {
                    err_str: Some(f), ..
                } => {
                    let mut p: *const c_char = std::ptr::null();
                    f(code, &mut p);
                    cstr(p)
                }
                CudaApi::Runtime {
                    err_str: Some(f), ..
                } => cstr(f(code)),
                _ => None,
            }
        };
        HelperError {
            stage: "cuda".into(),
            code: Some(code),
            error_string: es,
            message: format!("{what} returned {code}"),
            ..Default::default()
        }
    }

    /// Number of visible GPUs; CUDA_ERROR_NO_DEVICE (100) and, for the runtime without a driver,
    /// cudaErrorInsufficientDriver (35) mean no GPU.
    fn count(&self) -> Result<Count, HelperError> {
        let mut n: c_int = 0;
        // SAFETY: FFI with out-pointers to locals.
        unsafe {
            match &self.api {
                CudaApi::Driver { init, count, .. } => {
                    let rc = init(0);
                    if rc == 100 {
                        return Ok(Count::NoGpu("cuInit: no CUDA-capable device (100)".into()));
                    }
                    if rc != 0 {
                        return Err(self.err("cuInit", rc));
                    }
                    let rc = count(&mut n);
                    if rc != 0 {
                        return Err(self.err("cuDeviceGetCount", rc));
                    }
                }
                CudaApi::Runtime { count, .. } => {
                    let rc = count(&mut n);
                    if rc == 100 || rc == 35 {
                        return Ok(Count::NoGpu(format!(
                            "cudaGetDeviceCount returned {rc} (no device or no driver)"
                        )));
                    }
                    if rc != 0 {
                        return Err(self.err("cudaGetDeviceCount", rc));
                    }
                }
            }
        }
        if n <= 0 {
            Ok(Count::NoGpu("CUDA sees 0 devices".into()))
        } else {
            Ok(Count::Gpus(u32::try_from(n).unwrap_or(0)))
        }
    }

    /// Make device `dev` current (driver: primary context; runtime: cudaSetDevice) and create a stream.
    fn select(&self, dev: c_int) -> Result<*mut c_void, HelperError> {
        let mut stream: *mut c_void = std::ptr::null_mut();
        // SAFETY: FFI with out-pointers to locals.
        unsafe {
            match &self.api {
                CudaApi::Driver {
                    get,
                    retain,
                    set_current,
                    stream_create,
                    ..
                } => {
                    let mut d: c_int = 0;
                    let rc = get(&mut d, dev);
                    if rc != 0 {
                        return Err(self.err("cuDeviceGet", rc));
                    }
                    let mut ctx: *mut c_void = std::ptr::null_mut();
                    let rc = retain(&mut ctx, d);
                    if rc != 0 {
                        return Err(self.err("cuDevicePrimaryCtxRetain", rc));
                    }
                    let rc = set_current(ctx);
                    if rc != 0 {
                        return Err(self.err("cuCtxSetCurrent", rc));
                    }
                    let rc = stream_create(&mut stream, 0);
                    if rc != 0 {
                        return Err(self.err("cuStreamCreate", rc));
                    }
                }
                CudaApi::Runtime {
                    set_device,
                    stream_create,
                    ..
                } => {
                    let rc = set_device(dev);
                    if rc != 0 {
                        return Err(self.err("cudaSetDevice", rc));
                    }
                    let rc = stream_create(&mut stream);
                    if rc != 0 {
                        return Err(self.err("cudaStreamCreate", rc));
                    }
                }
            }
        }
        Ok(stream)
    }

    fn alloc(&self, bytes: usize) -> Result<*mut c_void, HelperError> {
        // SAFETY: FFI with out-pointers to locals.
        unsafe {
            match &self.api {
                CudaApi::Driver { alloc, .. } => {
                    let mut p: u64 = 0;
                    let rc = alloc(&mut p, bytes);
                    if rc != 0 {
                        return Err(self.err("cuMemAlloc", rc));
                    }
                    Ok(p as usize as *mut c_void)
                }
                CudaApi::Runtime { malloc, .. } => {
                    let mut p: *mut c_void = std::ptr::null_mut();
                    let rc = malloc(&mut p, bytes);
                    if rc != 0 {
                        return Err(self.err("cudaMalloc", rc));
                    }
                    Ok(p)
                }
            }
        }
    }

    fn to_device(&self, dst: *mut c_void, src: &[f32]) -> Result<(), HelperError> {
        let bytes = std::mem::size_of_val(src);
        // SAFETY: dst was allocated with at least `bytes`; src is a live slice.
        let rc = unsafe {
            match &self.api {
                CudaApi::Driver { htod, .. } => {
                    htod(dst as usize as u64, src.as_ptr() as *const c_void, bytes)
                }
                CudaApi::Runtime { memcpy, .. } => {
                    memcpy(dst, src.as_ptr() as *const c_void, bytes, 1)
                }
            }
        };
        if rc != 0 {
            return Err(self.err("memcpy host→device", rc));
        }
        Ok(())
    }

    fn to_host(&self, dst: &mut [f32], src: *mut c_void) -> Result<(), HelperError> {
        let bytes = std::mem::size_of_val(dst);
        // SAFETY: src holds at least `bytes`; dst is a live mutable slice.
        let rc = unsafe {
            match &self.api {
                CudaApi::Driver { dtoh, .. } => {
                    dtoh(dst.as_mut_ptr() as *mut c_void, src as usize as u64, bytes)
                }
                CudaApi::Runtime { memcpy, .. } => {
                    memcpy(dst.as_mut_ptr() as *mut c_void, src, bytes, 2)
                }
            }
        };
        if rc != 0 {
            let mut e = self.err("memcpy device→host", rc);
            e.stage = "verify".into();
            return Err(e);
        }
        Ok(())
    }

    fn sync(&self, stream: *mut c_void) -> Result<(), HelperError> {
        // SAFETY: stream came from stream_create.
        let rc = unsafe {
            match &self.api {
                CudaApi::Driver { stream_sync, .. } => stream_sync(stream),
                CudaApi::Runtime { stream_sync, .. } => stream_sync(stream),
            }
        };
        if rc != 0 {
            let mut e = self.err("stream synchronize", rc);
            e.stage = "collective".into();
            return Err(e);
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------------------------------------
// One rank
// -----------------------------------------------------------------------------------------------------------

const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;

/// Value rank `r` puts at element `i`; the sum over n ranks is n·(i mod 7) + n(n+1)/2, exact in float32.
fn pattern(i: usize, r: u32) -> f32 {
    ((i % 7) as u32 + r + 1) as f32
}

fn expected(i: usize, n: u32) -> f32 {
    (n * (i % 7) as u32 + n * (n + 1) / 2) as f32
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

struct RankArgs {
    rank: u32,
    gpus: u32,
    mib: u64,
    nranks: Option<u32>,
}

fn rank_fail(rank: u32, mut e: HelperError) -> ! {
    e.rank = Some(rank);
    let mut m = HelperMsg::new("rank_result");
    m.rank = Some(rank);
    m.ok = Some(false);
    m.error = Some(e);
    emit(&m);
    finish(0)
}

fn run_rank(a: RankArgs) -> ! {
    let r = a.rank;
    step(Some(r), "load");
    let nccl = Nccl::load().unwrap_or_else(|e| rank_fail(r, e));
    let cuda = match Cuda::load() {
        Ok(c) => c,
        Err(looked) => {
            if r == 0 {
                let mut m = HelperMsg::new("nogpu");
                m.rank = Some(0);
                m.note =
                    Some("no CUDA library found (libcuda.so.1, libcudart.so.13/.12/.11.0)".into());
                m.error = Some(HelperError {
                    stage: "load".into(),
                    message: "no CUDA library found".into(),
                    looked,
                    ..Default::default()
                });
                emit(&m);
                finish(0)
            }
            rank_fail(
                r,
                HelperError {
                    stage: "load".into(),
                    message: "no CUDA library found".into(),
                    looked,
                    ..Default::default()
                },
            )
        }
    };
    if r == 0 {
        emit(&nccl.lib_msg());
        let mut m = HelperMsg::new("lib");
        m.what = Some("cuda".into());
        m.path = Some(cuda.path.clone());
        m.cuda = Some(cuda.kind().into());
        emit(&m);
    }
    step(Some(r), "cuda");
    let visible = match cuda.count() {
        Ok(Count::Gpus(n)) => n,
        Ok(Count::NoGpu(why)) => {
            if r == 0 {
                let mut m = HelperMsg::new("nogpu");
                m.rank = Some(0);
                m.note = Some(why);
                emit(&m);
                finish(0)
            }
            rank_fail(
                r,
                HelperError {
                    stage: "cuda".into(),
                    message: why,
                    ..Default::default()
                },
            )
        }
        Err(e) => rank_fail(r, e),
    };
    let nranks = a.nranks.unwrap_or_else(|| a.gpus.max(1).min(visible));
    if r >= visible {
        rank_fail(
            r,
            HelperError {
                stage: "cuda".into(),
                message: format!("rank {r} has no GPU: only {visible} visible"),
                ..Default::default()
            },
        );
    }
    let id = if r == 0 {
        step(Some(0), "id");
        let id = nccl.unique_id().unwrap_or_else(|e| rank_fail(0, e));
        let mut m = HelperMsg::new("id");
        m.rank = Some(0);
        m.nranks = Some(nranks);
        m.gpus_visible = Some(visible);
        m.id = Some(hex(&id.internal));
        fill_addr(&mut m, &id);
        emit(&m);
        id
    } else {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let bytes = unhex(&line).filter(|b| b.len() == UNIQUE_ID_BYTES);
        let Some(bytes) = bytes else {
            rank_fail(
                r,
                HelperError {
                    stage: "init".into(),
                    message: "no valid unique id on stdin".into(),
                    ..Default::default()
                },
            )
        };
        let mut id = UniqueId {
            internal: [0u8; UNIQUE_ID_BYTES],
        };
        id.internal.copy_from_slice(&bytes);
        id
    };
    let stream = cuda.select(r as c_int).unwrap_or_else(|e| rank_fail(r, e));
    let count = usize::try_from(a.mib.max(1) * 1024 * 1024 / 4).unwrap_or(1 << 24);
    let bytes = count * 4;
    let host: Vec<f32> = (0..count).map(|i| pattern(i, r)).collect();
    let send = cuda.alloc(bytes).unwrap_or_else(|e| rank_fail(r, e));
    let recv = cuda.alloc(bytes).unwrap_or_else(|e| rank_fail(r, e));
    cuda.to_device(send, &host)
        .unwrap_or_else(|e| rank_fail(r, e));
    drop(host);
    step(Some(r), "init");
    let (Some(init), Some(allreduce)) = (nccl.comm_init_rank, nccl.all_reduce) else {
        rank_fail(
            r,
            HelperError {
                stage: "symbol".into(),
                message: format!("{}: no ncclCommInitRank/ncclAllReduce", nccl.path),
                ..Default::default()
            },
        )
    };
    let mut comm: NcclComm = std::ptr::null_mut();
    // SAFETY: signature from src/nccl.h.in; comm is an out-pointer.
    let rc = unsafe { init(&mut comm, nranks as c_int, id, r as c_int) };
    if rc != 0 {
        rank_fail(r, nccl.error("init", rc, "ncclCommInitRank"));
    }
    step(Some(r), "collective");
    let mut seconds = 0.0;
    for round in 0..2 {
        let t0 = Instant::now();
        // SAFETY: send/recv hold `count` floats on this rank's device; stream belongs to it.
        let rc = unsafe {
            allreduce(
                send as *const c_void,
                recv,
                count,
                NCCL_FLOAT32,
                NCCL_SUM,
                comm,
                stream,
            )
        };
        if rc != 0 {
            rank_fail(r, nccl.error("collective", rc, "ncclAllReduce"));
        }
        cuda.sync(stream).unwrap_or_else(|e| rank_fail(r, e));
        if round == 1 {
            seconds = t0.elapsed().as_secs_f64();
        }
    }
    step(Some(r), "verify");
    let mut out = vec![0f32; count];
    cuda.to_host(&mut out, recv)
        .unwrap_or_else(|e| rank_fail(r, e));
    let mut mismatches = 0u64;
    let mut first = None;
    for (i, got) in out.iter().enumerate() {
        let want = expected(i, nranks);
        if got.to_bits() != want.to_bits() {
            mismatches += 1;
            if first.is_none() {
                first = Some((i as u64, f64::from(want), f64::from(*got)));
            }
        }
    }
    let mut m = HelperMsg::new("rank_result");
    m.rank = Some(r);
    m.nranks = Some(nranks);
    m.bytes = Some(bytes as u64);
    m.seconds = Some(seconds);
    m.mismatches = Some(mismatches);
    m.first_mismatch = first;
    if mismatches == 0 {
        m.ok = Some(true);
    } else {
        m.ok = Some(false);
        m.error = Some(HelperError {
            stage: "verify".into(),
            rank: Some(r),
            message: format!(
                "wrong allreduce result on rank {r}: {mismatches} of {count} float32 elements differ; first at \
                 index {} (expected {}, got {})",
                first.map(|f| f.0).unwrap_or(0),
                first.map(|f| f.1).unwrap_or(0.0),
                first.map(|f| f.2).unwrap_or(0.0)
            ),
            ..Default::default()
        });
    }
    emit(&m);
    finish(0)
}

// -----------------------------------------------------------------------------------------------------------
// Orchestrator: one rank process per GPU
// -----------------------------------------------------------------------------------------------------------

enum RankLine {
    Msg(u32, HelperMsg),
    Eof(u32),
}

fn spawn_rank(
    exe: &Path,
    rank: u32,
    gpus: u32,
    mib: u64,
    nranks: Option<u32>,
    tx: &mpsc::Sender<RankLine>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.arg("rank")
        .arg("--rank")
        .arg(rank.to_string())
        .arg("--gpus")
        .arg(gpus.to_string())
        .arg("--mib")
        .arg(mib.to_string());
    if let Some(n) = nranks {
        cmd.arg("--nranks").arg(n.to_string());
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let rd = std::io::BufReader::new(out);
            for line in rd.lines() {
                let Ok(line) = line else { break };
                if let Ok(m) = serde_json::from_str::<HelperMsg>(&line) {
                    if tx.send(RankLine::Msg(rank, m)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(RankLine::Eof(rank));
        });
    }
    Ok(child)
}

fn kill_child(c: &mut Child) {
    let _ = c.kill();
}

fn allreduce(gpus: u32, mib: u64) -> HelperMsg {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return error_result(
                "allreduce",
                HelperError {
                    stage: "spawn".into(),
                    message: format!("cannot find own executable: {e}"),
                    ..Default::default()
                },
                None,
            )
        }
    };
    let (tx, rx) = mpsc::channel::<RankLine>();
    let mut children: Vec<Option<Child>> = Vec::new();
    match spawn_rank(&exe, 0, gpus, mib, None, &tx) {
        Ok(c) => children.push(Some(c)),
        Err(e) => {
            return error_result(
                "allreduce",
                HelperError {
                    stage: "spawn".into(),
                    message: format!("cannot start rank 0: {e}"),
                    ..Default::default()
                },
                None,
            )
        }
    }
    let mut open = 1usize;
    let mut results: Vec<HelperMsg> = Vec::new();
    let mut id_msg: Option<HelperMsg> = None;
    let mut nccl_version = None;
    let mut nogpu: Option<String> = None;
    let mut failure: Option<HelperError> = None;
    let mut killed: Vec<u32> = Vec::new();
    while open > 0 {
        let Ok(line) = rx.recv() else { break };
        match line {
            RankLine::Msg(rank, mut m) => {
                m.rank = m.rank.or(Some(rank));
                match m.ev.as_str() {
                    "lib" => {
                        nccl_version = nccl_version.or(m.nccl_version);
                        emit(&m);
                    }
                    "nogpu" => {
                        nogpu = m.note.clone();
                        emit(&m);
                    }
                    "id" if rank == 0 && id_msg.is_none() => {
                        let n = m.nranks.unwrap_or(1).max(1);
                        let idhex = m.id.clone().unwrap_or_default();
                        let mut fwd = m.clone();
                        fwd.id = None;
                        emit(&fwd);
                        id_msg = Some(m);
                        for r in 1..n {
                            match spawn_rank(&exe, r, gpus, mib, Some(n), &tx) {
                                Ok(mut c) => {
                                    if let Some(mut si) = c.stdin.take() {
                                        let _ = si.write_all(format!("{idhex}\n").as_bytes());
                                    }
                                    children.push(Some(c));
                                    open += 1;
                                }
                                Err(e) => {
                                    failure.get_or_insert(HelperError {
                                        stage: "spawn".into(),
                                        rank: Some(r),
                                        message: format!("cannot start rank {r}: {e}"),
                                        ..Default::default()
                                    });
                                    for (i, c) in children.iter_mut().enumerate() {
                                        if let Some(c) = c {
                                            kill_child(c);
                                            killed.push(i as u32);
                                        }
                                    }
                                    break;
                                }
                            }
                        }
                    }
                    "rank_result" => {
                        emit(&m);
                        if m.ok != Some(true) {
                            if failure.is_none() {
                                failure = Some(m.error.clone().unwrap_or(HelperError {
                                    stage: "crash".into(),
                                    rank: Some(rank),
                                    message: format!("rank {rank} failed"),
                                    ..Default::default()
                                }));
                            }
                            // The others would wait for this rank forever.
                            for (i, c) in children.iter_mut().enumerate() {
                                if i as u32 != rank {
                                    if let Some(c) = c {
                                        kill_child(c);
                                        killed.push(i as u32);
                                    }
                                }
                            }
                        }
                        results.push(m);
                    }
                    _ => emit(&m),
                }
            }
            RankLine::Eof(rank) => {
                open = open.saturating_sub(1);
                let status = children
                    .get_mut(rank as usize)
                    .and_then(|c| c.take())
                    .and_then(|mut c| c.wait().ok());
                let reported = results.iter().any(|m| m.rank == Some(rank));
                let was_killed = killed.contains(&rank);
                let nogpu_exit = rank == 0 && nogpu.is_some();
                if !(reported || was_killed || nogpu_exit) {
                    let how = status
                        .map(|s| {
                            use std::os::unix::process::ExitStatusExt;
                            match (s.code(), s.signal()) {
                                (_, Some(sig)) => format!(
                                    "killed by signal {sig} ({})",
                                    ncclenv::check::signal_name(sig)
                                ),
                                (Some(c), _) => format!("exit {c}"),
                                _ => "ended".into(),
                            }
                        })
                        .unwrap_or_else(|| "ended".into());
                    if failure.is_none() {
                        failure = Some(HelperError {
                            stage: "crash".into(),
                            rank: Some(rank),
                            message: format!("rank {rank} process died without a verdict ({how})"),
                            ..Default::default()
                        });
                    }
                    for (i, c) in children.iter_mut().enumerate() {
                        if let Some(c) = c {
                            kill_child(c);
                            killed.push(i as u32);
                        }
                    }
                }
            }
        }
    }
    for c in children.iter_mut().flatten() {
        kill_child(c);
        let _ = c.wait();
    }
    if let Some(why) = nogpu {
        let mut r = bootstrap(Some(format!(
            "no GPU: fell back to the bootstrap check ({why})"
        )));
        r.gpus_visible = Some(0);
        return r;
    }
    let mut r = HelperMsg::new("result");
    r.mode = Some("allreduce".into());
    r.nccl_version = nccl_version;
    if let Some(m) = &id_msg {
        r.addr = m.addr.clone();
        r.port = m.port;
        r.family = m.family.clone();
        r.nranks = m.nranks;
        r.gpus_visible = m.gpus_visible;
    }
    results.sort_by_key(|m| m.rank);
    if let Some(e) = failure {
        r.ok = Some(false);
        r.error = Some(e);
        r.ranks = results;
        return r;
    }
    let n = r.nranks.unwrap_or(0);
    if n == 0 || results.len() as u32 != n {
        r.ok = Some(false);
        r.error = Some(HelperError {
            stage: "crash".into(),
            message: format!("{} of {n} ranks reported", results.len()),
            ..Default::default()
        });
        r.ranks = results;
        return r;
    }
    let secs = results
        .iter()
        .filter_map(|m| m.seconds)
        .fold(0.0f64, f64::max);
    let bytes = results.iter().filter_map(|m| m.bytes).max().unwrap_or(0);
    r.ok = Some(true);
    r.bytes = Some(bytes);
    r.seconds = Some(secs);
    if secs > 0.0 {
        let alg = bytes as f64 / secs / 1e9;
        r.algbw_gbps = Some(alg);
        r.busbw_gbps = Some(alg * 2.0 * (f64::from(n) - 1.0) / f64::from(n));
    }
    if n == 1 {
        r.note = Some(
            "one GPU visible: a one-rank communicator (bootstrap and init exercised; nothing crossed between GPUs)"
                .into(),
        );
    }
    r.ranks = results;
    r
}

// -----------------------------------------------------------------------------------------------------------

const USAGE: &str = "usage: ncclenv-check bootstrap | allreduce [--gpus N] [--mib M] | \
                     rank --rank R --gpus N --mib M [--nranks N] | --version";

fn usage_error(msg: &str) -> ! {
    let e = HelperError {
        stage: "usage".into(),
        message: format!("{msg}; {USAGE}"),
        ..Default::default()
    };
    emit(&error_result("bootstrap", e, None));
    eprintln!("ncclenv-check: {msg}\n{USAGE}");
    finish(2)
}

fn main() {
    // `ncclenv explain` runs here (it is not linked into the static entrypoint): stdout is its own.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if raw
        .first()
        .is_some_and(|a| a == ncclenv::explain::HELPER_WORD)
    {
        let code = ncclenv::explain::main_in_helper(&raw[1..], std::env::vars_os().collect());
        std::process::exit(i32::from(code));
    }
    setup_stdout();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        usage_error("no command")
    };
    let mut gpus = 2u32;
    let mut mib = 64u64;
    let mut rank: Option<u32> = None;
    let mut nranks: Option<u32> = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let val = it.next();
        let parsed = val.and_then(|v| v.parse::<u64>().ok());
        let Some(v) = parsed else {
            usage_error(&format!("{a} needs a number"))
        };
        let v32 = u32::try_from(v).unwrap_or(u32::MAX);
        match a.as_str() {
            "--gpus" => gpus = v32.max(1),
            "--mib" => mib = v.clamp(1, 1 << 20),
            "--rank" => rank = Some(v32),
            "--nranks" => nranks = Some(v32.max(1)),
            other => usage_error(&format!("unknown option {other}")),
        }
    }
    match cmd.as_str() {
        "bootstrap" => {
            emit(&bootstrap(None));
            finish(0)
        }
        "allreduce" => {
            step(None, "load");
            emit(&allreduce(gpus, mib));
            finish(0)
        }
        "rank" => {
            let Some(rank) = rank else {
                usage_error("rank needs --rank")
            };
            run_rank(RankArgs {
                rank,
                gpus,
                mib,
                nranks,
            })
        }
        "--version" | "-V" => {
            println!("ncclenv-check {}", env!("CARGO_PKG_VERSION"));
            let mut m = HelperMsg::new("version");
            m.note = Some(env!("CARGO_PKG_VERSION").into());
            emit(&m);
            finish(0)
        }
        "--help" | "-h" => {
            eprintln!("{USAGE}");
            finish(0)
        }
        other => usage_error(&format!("unknown command {other}")),
    }
}
