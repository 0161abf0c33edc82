//! The helper's C interface to NCCL and CUDA, declared once: the types (with the C type each stands for),
//! the constants (with the C enumerators they must equal), and the signature of every function looked up
//! with `dlsym`. `nccl.rs` and `cuda.rs` call through these types; the macros also record each declaration
//! as text ([`TYPES`], [`STRUCTS`], [`CONSTANTS`], [`FUNCTIONS`]), from which `tests/it/c_interface.rs`
//! generates a C file that includes the real `nccl.h`, `cuda.h` and `cuda_runtime_api.h` of the pinned
//! wheels (scripts/install-nccl-wheels.sh, scripts/install-cuda-wheels.sh) and asserts, with
//! `_Static_assert`, that every declaration here is the header's. The test includes this file with
//! `#[path]`, so the C mirror is made from these very tokens and cannot drift from them.
//!
//! No code here calls anything: no `unsafe`.

// The tables are read by tests/it/c_interface.rs only (this file is included there too); some aliases are
// spelled out for the mirror although the helper's code uses their underlying type.
#![allow(dead_code)]

use ncclenv::check::protocol::UNIQUE_ID_BYTES;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::mem::{align_of, size_of};

/// A Rust alias and the C type it stands for.
pub struct CType {
    /// The alias (`NcclComm`).
    pub rust: &'static str,
    /// Its definition as written (`*mut c_void`).
    pub def: &'static str,
    /// The header's type (`ncclComm_t`).
    pub c: &'static str,
    /// `size_of` of the Rust type, bytes.
    pub size: usize,
    /// `align_of` of the Rust type, bytes.
    pub align: usize,
}

/// A constant and the C enumerators (or macros) it must equal.
pub struct CConst {
    /// The Rust name (`NCCL_FLOAT32`).
    pub rust: &'static str,
    /// Its value.
    pub value: i64,
    /// The header names with that value (`ncclFloat32`).
    pub c: &'static [&'static str],
}

/// A function looked up by `dlsym`: its symbol and the Rust signature as written.
pub struct CFn {
    /// The Rust alias of its pointer type (`FnAllReduce`).
    pub rust: &'static str,
    /// The exported symbol, as the header declares it (`cuMemAlloc_v2`, which `cuda.h` names `cuMemAlloc`).
    pub symbol: &'static str,
    /// The parameter types as written (`*mut NcclComm`).
    pub params: &'static [&'static str],
    /// The return type as written.
    pub ret: &'static str,
}

/// `pub type Alias = Def => "c type";` for each: the alias, and its [`CType`] in [`TYPES`].
macro_rules! c_types {
    ($($(#[$m:meta])* $alias:ident = $def:ty => $c:literal;)*) => {
        $($(#[$m])* pub type $alias = $def;)*
        /// Every alias with the C type it stands for.
        pub const TYPES: &[CType] = &[$(CType {
            rust: stringify!($alias),
            def: stringify!($def),
            c: $c,
            size: size_of::<$def>(),
            align: align_of::<$def>(),
        }),*];
    };
}

/// `pub const NAME: Ty = value => ["c name", ...];` for each: the constant, and its [`CConst`] in
/// [`CONSTANTS`].
macro_rules! c_consts {
    ($($(#[$m:meta])* $name:ident: $ty:ty = $v:expr => [$($c:literal),+];)*) => {
        $($(#[$m])* pub const $name: $ty = $v;)*
        /// Every constant with the C names it must equal.
        pub const CONSTANTS: &[CConst] = &[$(CConst {
            rust: stringify!($name),
            value: $name as i64,
            c: &[$($c),+],
        }),*];
    };
}

/// `pub type FnX = "symbol" fn(params) -> ret;` for each: the `unsafe extern "C"` pointer type, and its
/// [`CFn`] in [`FUNCTIONS`].
macro_rules! c_fns {
    ($($(#[$m:meta])* $alias:ident = $sym:literal fn($($p:ty),*) -> $r:ty;)*) => {
        $($(#[$m])* pub type $alias = unsafe extern "C" fn($($p),*) -> $r;)*
        /// Every function the helper looks up, with its signature as written.
        pub const FUNCTIONS: &[CFn] = &[$(CFn {
            rust: stringify!($alias),
            symbol: $sym,
            params: &[$(stringify!($p)),*],
            ret: stringify!($r),
        }),*];
    };
}

c_types! {
    /// `ncclResult_t` (nccl.h).
    NcclResult = c_int => "ncclResult_t";
    /// `ncclComm_t`, an opaque pointer (nccl.h).
    NcclComm = *mut c_void => "ncclComm_t";
    /// `ncclDataType_t` (nccl.h).
    NcclDataType = c_int => "ncclDataType_t";
    /// `ncclRedOp_t` (nccl.h).
    NcclRedOp = c_int => "ncclRedOp_t";
    /// `cudaStream_t`, which NCCL's collectives take; the driver's `CUstream` is the same pointer.
    CudaStream = *mut c_void => "cudaStream_t";
    /// `CUresult` (cuda.h).
    CuResult = c_int => "CUresult";
    /// `CUdevice`, an ordinal (cuda.h).
    CuDevice = c_int => "CUdevice";
    /// `CUcontext`, an opaque pointer (cuda.h).
    CuContext = *mut c_void => "CUcontext";
    /// `CUstream`, an opaque pointer (cuda.h).
    CuStream = *mut c_void => "CUstream";
    /// `CUdeviceptr`, a device address (cuda.h: `unsigned long long` on 64-bit hosts).
    CuDevicePtr = c_ulonglong => "CUdeviceptr";
    /// `cudaError_t` (cuda_runtime_api.h, driver_types.h).
    CudaError = c_int => "cudaError_t";
    /// `enum cudaMemcpyKind` (driver_types.h).
    CudaMemcpyKind = c_int => "enum cudaMemcpyKind";
}

/// `ncclUniqueId`: 128 bytes passed by value (nccl.h: `typedef struct { char internal[128]; }`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// The bytes NCCL fills.
    pub internal: [u8; UNIQUE_ID_BYTES],
}

/// The structs with the C type each is: name, C type, size, alignment.
pub const STRUCTS: &[CType] = &[CType {
    rust: "UniqueId",
    def: "struct { internal: [u8; UNIQUE_ID_BYTES] }",
    c: "ncclUniqueId",
    size: size_of::<UniqueId>(),
    align: align_of::<UniqueId>(),
}];

c_consts! {
    /// `ncclSuccess`.
    NCCL_SUCCESS: NcclResult = 0 => ["ncclSuccess"];
    /// `ncclDataType_t` `ncclFloat32` (also `ncclFloat`).
    NCCL_FLOAT32: NcclDataType = 7 => ["ncclFloat32", "ncclFloat"];
    /// `ncclRedOp_t` `ncclSum`.
    NCCL_SUM: NcclRedOp = 0 => ["ncclSum"];
    /// `NCCL_UNIQUE_ID_BYTES`, the size of `ncclUniqueId`.
    UNIQUE_ID_LEN: usize = UNIQUE_ID_BYTES => ["NCCL_UNIQUE_ID_BYTES", "sizeof(ncclUniqueId)"];
    /// `CUDA_SUCCESS` and `cudaSuccess`.
    CUDA_OK: c_int = 0 => ["CUDA_SUCCESS", "cudaSuccess"];
    /// `CUDA_ERROR_NO_DEVICE` (driver) and `cudaErrorNoDevice` (runtime): no CUDA-capable device.
    NO_DEVICE: c_int = 100 => ["CUDA_ERROR_NO_DEVICE", "cudaErrorNoDevice"];
    /// `cudaErrorInsufficientDriver`: the runtime without a (recent enough) driver, as where no GPU is.
    INSUFFICIENT_DRIVER: CudaError = 35 => ["cudaErrorInsufficientDriver"];
    /// `cudaMemcpyHostToDevice`.
    HOST_TO_DEVICE: CudaMemcpyKind = 1 => ["cudaMemcpyHostToDevice"];
    /// `cudaMemcpyDeviceToHost`.
    DEVICE_TO_HOST: CudaMemcpyKind = 2 => ["cudaMemcpyDeviceToHost"];
}

c_fns! {
    /// `ncclGetVersion(int *version)`.
    FnGetVersion = "ncclGetVersion" fn(*mut c_int) -> NcclResult;
    /// `ncclGetUniqueId(ncclUniqueId *uniqueId)`.
    FnGetUniqueId = "ncclGetUniqueId" fn(*mut UniqueId) -> NcclResult;
    /// `ncclGetErrorString(ncclResult_t result)`.
    FnGetErrorString = "ncclGetErrorString" fn(NcclResult) -> *const c_char;
    /// `ncclGetLastError(ncclComm_t comm)`.
    FnGetLastError = "ncclGetLastError" fn(NcclComm) -> *const c_char;
    /// `ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)`.
    FnCommInitRank = "ncclCommInitRank" fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult;
    /// `ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream)`.
    FnAllReduce = "ncclAllReduce" fn(
        *const c_void, *mut c_void, usize, NcclDataType, NcclRedOp, NcclComm, CudaStream
    ) -> NcclResult;

    /// `cuInit(unsigned int Flags)`.
    FnCuInit = "cuInit" fn(c_uint) -> CuResult;
    /// `cuDeviceGetCount(int *count)`.
    FnCuDeviceGetCount = "cuDeviceGetCount" fn(*mut c_int) -> CuResult;
    /// `cuDeviceGet(CUdevice *device, int ordinal)`.
    FnCuDeviceGet = "cuDeviceGet" fn(*mut CuDevice, c_int) -> CuResult;
    /// `cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)`.
    FnCuPrimaryCtxRetain = "cuDevicePrimaryCtxRetain" fn(*mut CuContext, CuDevice) -> CuResult;
    /// `cuCtxSetCurrent(CUcontext ctx)`.
    FnCuCtxSetCurrent = "cuCtxSetCurrent" fn(CuContext) -> CuResult;
    /// `cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)`, exported as `cuMemAlloc_v2` (CUDA ≥ 3.2).
    FnCuMemAlloc = "cuMemAlloc_v2" fn(*mut CuDevicePtr, usize) -> CuResult;
    /// `cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)`, exported `_v2`.
    FnCuMemcpyHtoD = "cuMemcpyHtoD_v2" fn(CuDevicePtr, *const c_void, usize) -> CuResult;
    /// `cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)`, exported `_v2`.
    FnCuMemcpyDtoH = "cuMemcpyDtoH_v2" fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
    /// `cuStreamCreate(CUstream *phStream, unsigned int Flags)`.
    FnCuStreamCreate = "cuStreamCreate" fn(*mut CuStream, c_uint) -> CuResult;
    /// `cuStreamSynchronize(CUstream hStream)`.
    FnCuStreamSynchronize = "cuStreamSynchronize" fn(CuStream) -> CuResult;
    /// `cuGetErrorString(CUresult error, const char **pStr)`.
    FnCuGetErrorString = "cuGetErrorString" fn(CuResult, *mut *const c_char) -> CuResult;

    /// `cudaGetDeviceCount(int *count)`.
    FnCudaGetDeviceCount = "cudaGetDeviceCount" fn(*mut c_int) -> CudaError;
    /// `cudaSetDevice(int device)`.
    FnCudaSetDevice = "cudaSetDevice" fn(c_int) -> CudaError;
    /// `cudaMalloc(void **devPtr, size_t size)`.
    FnCudaMalloc = "cudaMalloc" fn(*mut *mut c_void, usize) -> CudaError;
    /// `cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)`.
    FnCudaMemcpy = "cudaMemcpy" fn(*mut c_void, *const c_void, usize, CudaMemcpyKind) -> CudaError;
    /// `cudaStreamCreate(cudaStream_t *pStream)`.
    FnCudaStreamCreate = "cudaStreamCreate" fn(*mut CudaStream) -> CudaError;
    /// `cudaStreamSynchronize(cudaStream_t stream)`.
    FnCudaStreamSynchronize = "cudaStreamSynchronize" fn(CudaStream) -> CudaError;
    /// `cudaGetErrorString(cudaError_t error)`.
    FnCudaGetErrorString = "cudaGetErrorString" fn(CudaError) -> *const c_char;
}
