//! The helper's C calls that are neither NCCL's nor CUDA's: loading a shared library (`dlopen`), looking up
//! its symbols (`dlsym`), finding the file a symbol came from (`dladdr`), reading a C string, and ending the
//! process without running destructors (`_exit`). With `nccl.rs` and `cuda.rs`, the only files with `unsafe`.

use libloading::Library;
use std::ffi::{c_char, c_void, CStr};

/// Load the shared library at `path` (or by name through the loader's search); the error is the loader's
/// own text (`dlerror`).
pub fn open(path: &str) -> Result<Library, String> {
    // SAFETY: loading a shared library runs its initialisers; that is the point of this helper, which runs in
    // a throwaway process.
    unsafe { Library::new(path) }.map_err(|e| {
        std::error::Error::source(&e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| e.to_string())
    })
}

/// True when `lib` exports `name`.
pub fn has(lib: &Library, name: &str) -> bool {
    // SAFETY: only the symbol's presence is looked at; the pointer is never used.
    unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_ok()
}

/// Copy a symbol's function pointer out of the library.
///
/// # Safety
/// `T` must be the symbol's true C signature, and the library must stay loaded while the pointer is used
/// (the helper never unloads one).
pub unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees the type; the symbol is copied out of libloading's guard.
    unsafe { lib.get::<T>(name.as_bytes()) }.ok().map(|s| *s)
}

/// The file a symbol was loaded from (`dladdr`), for libraries found by the loader's search; `fallback` when
/// the loader does not say, or says something that is not an absolute path.
pub fn origin(addr: *const c_void, fallback: &str) -> String {
    let mut info = std::mem::MaybeUninit::<nix::libc::Dl_info>::zeroed();
    // SAFETY: dladdr fills the struct (zeroed beforehand) and returns 0 when it could not.
    let found = unsafe { nix::libc::dladdr(addr, info.as_mut_ptr()) } != 0;
    if !found {
        return fallback.to_string();
    }
    // SAFETY: zero-initialised, then filled by dladdr.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return fallback.to_string();
    }
    // SAFETY: dli_fname points to a NUL-terminated path in the loader's tables, which live as long as the
    // library (never unloaded).
    match unsafe { CStr::from_ptr(info.dli_fname) }.to_str() {
        Ok(s) if s.starts_with('/') => s.to_string(),
        _ => fallback.to_string(),
    }
}

/// The text of a C string returned by NCCL or CUDA (`None` for NULL).
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid while it is read (NCCL's and CUDA's
/// error strings are static).
pub unsafe fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated, as the caller guarantees.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// End the process with `code` at once (`_exit`): NCCL's and CUDA's destructors, which `exit` would run, may
/// block on their detached threads.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes any status and does not return; nothing of this process is used after it.
    unsafe { nix::libc::_exit(code) }
}
