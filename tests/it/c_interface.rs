//! The helper's C interface (src/bin/ncclenv-check/decls.rs) against the real headers, without a GPU: a C file
//! generated from decls.rs's own tables is compiled (`cc -fsyntax-only`) against `nccl.h` of every
//! `nvidia-nccl-cu12` wheel (scripts/install-nccl-wheels.sh) and `cuda.h` + `cuda_runtime_api.h` of every CUDA
//! set (scripts/install-cuda-wheels.sh: 12.9 and 13.0), asserting with `_Static_assert`:
//! - every constant equals each header enumerator (or macro, or `sizeof`) it names;
//! - every type alias has its header type's size and alignment, and is the same kind of type (an integer of
//!   the same rank, a pointer): GCC gives an enum without negative enumerators the compatible type
//!   `unsigned int` (GCC manual, "Structures, Unions, Enumerations, and Bit-Fields"), so `c_int` for
//!   `ncclResult_t` may differ in signedness only, which changes neither size nor how it is passed;
//! - `ncclUniqueId`'s size and alignment;
//! - every function looked up with `dlsym` has exactly the header's type: `__builtin_types_compatible_p` of a
//!   function-pointer type spelled from the Rust parameter and return types (each alias replaced by the
//!   header type it stands for) and `__typeof__(&symbol)`.
//!
//! decls.rs is included here with `#[path]`, so the C mirror is made from the tokens the helper is compiled
//! from. [`a_wrong_declaration_fails_the_compile`] shows that the check can fail: one wrong declaration of each
//! kind, each named in the compiler's errors. Needs `cc` and both wheel sets (a skip outside CI, a failure
//! under CI=true).

use crate::common;

#[path = "../../src/bin/ncclenv-check/decls.rs"]
mod decls;

use decls::{CConst, CFn, CType, CONSTANTS, FUNCTIONS, STRUCTS, TYPES};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The declarations a C file is generated from (decls.rs's, or a test's altered copy).
struct Tables<'a> {
    types: &'a [CType],
    structs: &'a [CType],
    consts: &'a [CConst],
    fns: &'a [CFn],
}

/// decls.rs's own tables.
fn real() -> Tables<'static> {
    Tables {
        types: TYPES,
        structs: STRUCTS,
        consts: CONSTANTS,
        fns: FUNCTIONS,
    }
}

/// The C spelling of a Rust primitive as decls.rs writes it (`std::ffi` names, `usize`, `u8`).
fn primitive(rust: &str) -> Option<&'static str> {
    Some(match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_long" => "long",
        "c_ulong" => "unsigned long",
        "c_longlong" => "long long",
        "c_ulonglong" => "unsigned long long",
        "usize" => "size_t",
        "u8" => "unsigned char",
        _ => return None,
    })
}

/// The C type of a Rust type as `stringify!` wrote it: `*mut T` is `T *`, `*const T` is `T const *`, a
/// primitive its C name, and an alias (or struct) of the tables the header type it stands for when
/// `aliases`, else the C spelling of its definition. Panics on a type it cannot spell (a new one belongs in
/// [`primitive`]).
fn c_type(rust: &str, t: &Tables, aliases: bool) -> String {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(inner, t, aliases));
    }
    if let Some(inner) = rust.strip_prefix("*const ") {
        return format!("{} const *", c_type(inner, t, aliases));
    }
    if let Some(c) = primitive(rust) {
        return c.to_string();
    }
    if let Some(a) = t.types.iter().chain(t.structs).find(|a| a.rust == rust) {
        return if aliases {
            a.c.to_string()
        } else {
            c_type(a.def, t, false)
        };
    }
    panic!("decls.rs type `{rust}` has no C spelling here: add it to primitive() in tests/it/c_interface.rs")
}

/// `_Static_assert(cond, "decls.rs: NAME: what")`.
fn assert_line(cond: &str, name: &str, what: &str) -> String {
    let what = what.replace('"', "'");
    format!("_Static_assert({cond}, \"decls.rs: {name}: {what}\");\n")
}

/// The assertions on the aliases: size, alignment, kind.
fn type_asserts(t: &Tables) -> String {
    let mut s = String::new();
    for a in t.types {
        let (c, m) = (a.c, c_type(a.def, t, false));
        let name = format!("{} = {}", a.rust, a.def);
        s += &assert_line(
            &format!("sizeof({c}) == {}", a.size),
            &name,
            &format!("sizeof({c}) is not {} (Rust's size_of)", a.size),
        );
        s += &assert_line(
            &format!("_Alignof({c}) == {}", a.align),
            &name,
            &format!("_Alignof({c}) is not {} (Rust's align_of)", a.align),
        );
        let kind = if m.ends_with('*') {
            // Both pointers (to whatever: `void *` stands for an opaque `struct ncclComm *`).
            format!("__builtin_classify_type(({c})0) == 5 && sizeof({c}) == sizeof({m})")
        } else {
            // The same integer type, or the one of the same rank and other signedness (an enum, see above).
            let other = match m.strip_prefix("unsigned ") {
                Some(signed) => signed.to_string(),
                None => format!("unsigned {m}"),
            };
            format!(
                "__builtin_classify_type(({c})0) == 1 && (__builtin_types_compatible_p({c}, {m}) || \
                 __builtin_types_compatible_p({c}, {other}))"
            )
        };
        s += &assert_line(&kind, &name, &format!("{c} is not a {m}"));
    }
    for a in t.structs {
        let c = a.c;
        s += &assert_line(
            &format!("sizeof({c}) == {} && _Alignof({c}) == {}", a.size, a.align),
            a.rust,
            &format!("{c} is not {} bytes aligned to {}", a.size, a.align),
        );
    }
    s
}

/// The C file: the headers, then one assertion per declaration (and per C name of a constant).
fn source(t: &Tables) -> String {
    let mut s = String::from(
        "/* Generated by tests/it/c_interface.rs from src/bin/ncclenv-check/decls.rs. */\n\
         #include <stddef.h>\n#include <cuda.h>\n#include <cuda_runtime_api.h>\n#include <nccl.h>\n\n",
    );
    s += &type_asserts(t);
    for k in t.consts {
        for c in k.c {
            s += &assert_line(
                &format!("(long long)({c}) == {}LL", k.value),
                k.rust,
                &format!("{c} is not {}", k.value),
            );
        }
    }
    for f in t.fns {
        let params: Vec<String> = f.params.iter().map(|p| c_type(p, t, true)).collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        let ret = c_type(f.ret, t, true);
        s += &format!("typedef {ret} (*ncclenv_{})({params});\n", f.rust);
        s += &assert_line(
            &format!(
                "__builtin_types_compatible_p(ncclenv_{}, __typeof__(&{}))",
                f.rust, f.symbol
            ),
            f.rust,
            &format!(
                "fn({}) -> {} is not the header's {}",
                f.params.join(", "),
                f.ret,
                f.symbol
            ),
        );
    }
    s
}

/// The number of `_Static_assert`s [`source`] writes for `t` (so that no table is silently left out).
fn expected_asserts(t: &Tables) -> usize {
    3 * t.types.len()
        + t.structs.len()
        + t.consts.iter().map(|k| k.c.len()).sum::<usize>()
        + t.fns.len()
}

/// One combination of headers: a label, `nccl.h`'s folder, the CUDA set's include folder.
struct Headers {
    label: String,
    nccl: PathBuf,
    cuda: PathBuf,
}

/// Every NCCL wheel's `nccl.h` with every CUDA set, or `None` (a skip; a failure under CI) when `cc`, the
/// NCCL wheels or the CUDA sets are missing.
fn headers() -> Option<Vec<Headers>> {
    if !common::needs::program("cc", &["--version"], "apt-get install gcc") {
        return None;
    }
    let wheels = common::needs::nccl_wheels()?;
    let sets = common::needs::cuda_sets()?;
    let mut v = Vec::new();
    for w in &wheels {
        let nccl = w.dir.join("nvidia/nccl/include");
        if !nccl.join("nccl.h").is_file() {
            return common::needs::missing(&format!("{}: no nccl.h", nccl.display()));
        }
        for s in &sets {
            v.push(Headers {
                label: format!("nccl {} + CUDA {}", w.version, s.version),
                nccl: nccl.clone(),
                cuda: s.include.clone(),
            });
        }
    }
    Some(v)
}

/// `cc -fsyntax-only` of `src` against `h`: success and the compiler's stderr.
fn compile(src: &str, h: &Headers, dir: &Path, name: &str) -> (bool, String) {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, src).expect("write the C file");
    let out = Command::new("cc")
        .args(["-std=gnu11", "-fsyntax-only", "-fmax-errors=0"])
        .arg("-I")
        .arg(&h.nccl)
        .arg("-I")
        .arg(&h.cuda)
        .arg(&file)
        .output()
        .expect("run cc");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_declaration_is_the_headers() {
    let Some(all) = headers() else { return };
    let t = real();
    let src = source(&t);
    assert_eq!(
        src.matches("_Static_assert(").count(),
        expected_asserts(&t),
        "{src}"
    );
    assert!(t.fns.len() >= 20 && t.consts.len() >= 9 && t.types.len() >= 12);
    let tmp = common::TempDir::new("c-interface");
    for (i, h) in all.iter().enumerate() {
        let (ok, err) = compile(&src, h, &tmp.path, &format!("decls-{i}"));
        assert!(
            ok,
            "{}: decls.rs differs from the headers:\n{err}\n{src}",
            h.label
        );
    }
}

/// An altered copy of decls.rs's declarations, one wrong thing of each kind, and the name of each (the
/// compiler must name every one of them).
struct Wrong {
    types: Vec<CType>,
    structs: Vec<CType>,
    consts: Vec<CConst>,
    fns: Vec<CFn>,
    names: Vec<&'static str>,
}

fn wrong_tables() -> Wrong {
    let ty = |a: &CType| CType { ..*a };
    let mut types: Vec<CType> = TYPES.iter().map(ty).collect();
    let mut structs: Vec<CType> = STRUCTS.iter().map(ty).collect();
    let mut consts: Vec<CConst> = CONSTANTS.iter().map(|k| CConst { ..*k }).collect();
    let mut fns: Vec<CFn> = FUNCTIONS.iter().map(|f| CFn { ..*f }).collect();
    let mut names = Vec::new();
    let mut edit_fn = |rust: &'static str, f: &dyn Fn(&mut CFn)| {
        let x = fns.iter_mut().find(|x| x.rust == rust).expect("declared");
        f(x);
        names.push(rust);
    };
    // A parameter of another type, one missing, another return type, the driver's result for the runtime's,
    // and a misspelt symbol.
    edit_fn("FnGetVersion", &|f| f.params = &["*mut c_uint"]);
    edit_fn("FnCommInitRank", &|f| {
        f.params = &["*mut NcclComm", "c_int", "UniqueId"]
    });
    edit_fn("FnGetErrorString", &|f| f.ret = "*const c_void");
    edit_fn("FnCudaSetDevice", &|f| f.ret = "CuResult");
    edit_fn("FnCuMemAlloc", &|f| {
        f.params = &["*mut CuDevicePtr", "c_uint"]
    });
    let mut edit_const = |rust: &'static str, value: i64| {
        let k = consts
            .iter_mut()
            .find(|k| k.rust == rust)
            .expect("declared");
        k.value = value;
        names.push(rust);
    };
    edit_const("NCCL_FLOAT32", 6);
    edit_const("NO_DEVICE", 101);
    edit_const("INSUFFICIENT_DRIVER", 3);
    let a = types
        .iter_mut()
        .find(|a| a.rust == "NcclResult")
        .expect("declared");
    (a.def, a.size, a.align) = ("c_longlong", 8, 8);
    let a = types
        .iter_mut()
        .find(|a| a.rust == "NcclComm")
        .expect("declared");
    (a.def, a.size, a.align) = ("c_ulong", 8, 8);
    structs[0].size = 127;
    names.extend(["NcclResult = c_longlong", "NcclComm = c_ulong", "UniqueId"]);
    Wrong {
        types,
        structs,
        consts,
        fns,
        names,
    }
}

#[test]
fn a_wrong_declaration_fails_the_compile() {
    let Some(all) = headers() else { return };
    let Wrong {
        types,
        structs,
        consts,
        fns,
        names,
    } = wrong_tables();
    let t = Tables {
        types: &types,
        structs: &structs,
        consts: &consts,
        fns: &fns,
    };
    // A symbol the headers do not declare (NCCL's is ncclAllReduce) cannot compile either.
    let all_reduce = FUNCTIONS
        .iter()
        .find(|f| f.rust == "FnAllReduce")
        .expect("declared");
    let misspelt = [CFn {
        symbol: "ncclAllreduce",
        ..*all_reduce
    }];
    let t_misspelt = Tables {
        fns: &misspelt,
        consts: &[],
        ..real()
    };
    let tmp = common::TempDir::new("c-interface-wrong");
    // The newest NCCL with each CUDA set.
    for h in all.iter().rev().take(2) {
        let (ok, err) = compile(&source(&t), h, &tmp.path, "wrong");
        assert!(!ok, "{}: wrong declarations compiled", h.label);
        for n in &names {
            assert!(
                err.contains(&format!("decls.rs: {n}:")),
                "{}: the wrong {n} is not reported:\n{err}",
                h.label
            );
        }
        let (ok, err) = compile(&source(&t_misspelt), h, &tmp.path, "misspelt");
        assert!(!ok && err.contains("ncclAllreduce"), "{}: {err}", h.label);
    }
}

#[test]
fn every_symbol_the_helper_looks_up_is_declared() {
    // Every `ffi::sym(…, "NAME")` and `ffi::sym::<FnX>(…, "NAME")` in nccl.rs and cuda.rs: NAME must be a
    // declared symbol, and FnX the declaration of NAME.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/ncclenv-check");
    let mut seen = Vec::new();
    for file in ["nccl.rs", "cuda.rs"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("read helper source");
        for (at, _) in text.match_indices("ffi::sym") {
            let rest = &text[at + "ffi::sym".len()..];
            let alias = rest
                .strip_prefix("::<")
                .and_then(|r| r.split_once('>'))
                .map(|(a, _)| a.trim());
            let name = rest
                .split_once('"')
                .and_then(|(_, r)| r.split_once('"'))
                .map(|(n, _)| n)
                .expect("a symbol name in quotes");
            let decl = FUNCTIONS.iter().find(|f| f.symbol == name);
            let decl =
                decl.unwrap_or_else(|| panic!("{file}: {name} is looked up but not in decls.rs"));
            if let Some(alias) = alias {
                assert_eq!(alias, decl.rust, "{file}: {name} looked up as {alias}");
            }
            seen.push(name.to_string());
        }
    }
    for f in FUNCTIONS {
        assert!(
            seen.iter().any(|s| s == f.symbol),
            "{} is declared but never looked up",
            f.symbol
        );
    }
}
