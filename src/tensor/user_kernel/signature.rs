//! A kernel's parameter list, as far as it can be known without running it, and the check of a
//! launch's arguments against it (the same on every driver, so the simulated machine gives the
//! errors a GPU would):
//!
//! * CUDA C: the `__global__` declaration of the kernel in the source — pointer parameters take
//!   a tensor of the pointee's dtype (`float*` an `F32` tensor, `void*` or an unknown type any),
//!   scalars a [`KernelScalar`](super::KernelScalar) of the same C type (`int` an `i32`);
//! * PTX: the `.entry` parameter list (`.param .u64`, `.param .f32`, …): count, sizes, and
//!   floating point against integer;
//! * a cubin: the sizes the CUDA driver reports (`cuFuncGetParamInfo`), on the CUDA driver only.
//!
//! What cannot be read with certainty (a template, a macro in the declaration, a type the parser
//! does not know) is not checked: the parser never reports an error the compiler would not.

use super::{Arg, KernelArg};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// What one parameter takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Param {
    /// A `T*`: a tensor, of `dtype` when `T` names one (`None`: any dtype).
    Tensor { decl: String, dtype: Option<DType> },
    /// A C scalar by value: a [`KernelScalar`](super::KernelScalar) named `ty` (`None`: a type
    /// this parser does not map, not checked).
    Scalar { decl: String, ty: Option<&'static str> },
    /// A parameter of `size` bytes (PTX, a cubin); `float`: whether PTX says floating point
    /// (`None`: untyped bits, or unknown).
    Bytes { decl: String, size: usize, float: Option<bool> },
}

/// A kernel's parameters and where they were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signature {
    pub params: Vec<Param>,
    /// Where the list comes from, for errors ("its CUDA C declaration", "its PTX .entry").
    pub from: &'static str,
}

/// The C type names the pointer parameters map to a dtype.
fn pointee_dtype(ty: &str) -> Option<DType> {
    Some(match ty {
        "float" => DType::F32,
        "double" => DType::F64,
        "__half" | "half" => DType::F16,
        "__nv_bfloat16" | "nv_bfloat16" => DType::BF16,
        "int" | "int32_t" => DType::I32,
        "long long" | "long" | "int64_t" => DType::I64,
        "unsigned char" | "uint8_t" => DType::U8,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// The [`KernelScalar`](super::KernelScalar) a by-value C type takes (Linux's LP64 sizes).
fn scalar_name(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "float" => "float",
        "double" => "double",
        "int" | "int32_t" => "int",
        "long long" | "long" | "int64_t" | "ptrdiff_t" => "long long",
        "unsigned int" | "unsigned" | "uint32_t" => "unsigned int",
        "unsigned long long" | "unsigned long" | "uint64_t" | "size_t" => "unsigned long long",
        _ => return None,
    })
}

/// `src` without comments (each replaced by a space).
fn strip_comments(src: &str) -> String {
    let (mut out, mut rest) = (String::with_capacity(src.len()), src);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifiers of `text`.
fn idents(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty() && !w.starts_with(|c: char| c.is_ascii_digit()))
}

/// The parameter list of the `__global__` function `name` in CUDA C `source` (with `header`,
/// whose macros count too); `None` when it cannot be read with certainty.
pub(super) fn from_cuda_c(header: &str, source: &str, name: &str) -> Option<Signature> {
    let all = strip_comments(&format!("{header}\n{source}"));
    let macros: Vec<&str> = all
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#')?.trim_start().strip_prefix("define"))
        .filter_map(|d| idents(d).next())
        .collect();
    // Preprocessor lines (`#include <…>`) are no part of a declaration.
    let code: String = strip_comments(source)
        .lines()
        .map(|l| if l.trim_start().starts_with('#') { "" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found: Option<Vec<Param>> = None;
    let mut at = 0;
    while let Some(i) = code[at..].find(name).map(|i| i + at) {
        at = i + name.len();
        let before = code[..i].chars().next_back();
        if before.is_some_and(is_ident) || code[at..].starts_with(is_ident) {
            continue;
        }
        let Some(args) = code[at..].trim_start().strip_prefix('(') else { continue };
        let head_start = code[..i].rfind([';', '}', '{']).map_or(0, |j| j + 1);
        let head = &code[head_start..i];
        if !idents(head).any(|w| w == "__global__") {
            continue;
        }
        let close = args.find(')')?;
        let list = &args[..close];
        let unsure = |t: &str| {
            t.contains(['<', '>', '(', '[', '&', '.']) || idents(t).any(|w| macros.contains(&w) || w == "template")
        };
        if unsure(head) || unsure(list) {
            return None;
        }
        let params = parse_c_params(list)?;
        match &found {
            Some(p) if *p != params => return None, // overloads or a mismatched declaration
            _ => found = Some(params),
        }
    }
    found.map(|params| Signature { params, from: "its CUDA C declaration" })
}

/// The parameters of a C parameter list (`None` when one cannot be read).
fn parse_c_params(list: &str) -> Option<Vec<Param>> {
    let list = list.trim();
    if list.is_empty() || list == "void" {
        return Some(Vec::new());
    }
    list.split(',').map(parse_c_param).collect()
}

const QUALIFIERS: &[&str] =
    &["const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "signed", "struct"];
const TYPE_WORDS: &[&str] = &["unsigned", "long", "int", "short", "char", "float", "double", "bool", "void"];

fn parse_c_param(p: &str) -> Option<Param> {
    let decl = p.split_whitespace().collect::<Vec<_>>().join(" ");
    let stars = p.matches('*').count();
    let signed = idents(p).any(|w| w == "signed");
    let mut words: Vec<&str> = idents(p).filter(|w| !QUALIFIERS.contains(w)).collect();
    // The last word is the parameter's name unless the type alone is written (`float*`, `int`).
    if words.last().is_some_and(|w| !TYPE_WORDS.contains(w)) && (words.len() > 1 || signed) {
        words.pop();
    }
    let ty = if words.is_empty() && signed { "int".to_owned() } else { words.join(" ") };
    if ty.is_empty() {
        return None;
    }
    let ty = ty.strip_suffix(" int").filter(|t| t.contains("long") || *t == "unsigned").unwrap_or(&ty).to_owned();
    Some(match stars {
        0 => Param::Scalar { ty: scalar_name(&ty), decl },
        1 => Param::Tensor { dtype: pointee_dtype(&ty), decl },
        _ => Param::Scalar { ty: None, decl },
    })
}

/// The parameters of the kernel `.entry name` in PTX `ptx`; `None` when there is none.
pub(super) fn from_ptx(ptx: &str, name: &str) -> Option<Signature> {
    let code = strip_comments(ptx);
    let mut at = 0;
    while let Some(i) = code[at..].find(".entry").map(|i| i + at) {
        at = i + ".entry".len();
        let rest = code[at..].trim_start();
        let Some(after) = rest.strip_prefix(name) else { continue };
        if after.starts_with(is_ident) || rest.len() == code[at..].len() {
            continue;
        }
        let after = after.trim_start();
        let Some(args) = after.strip_prefix('(') else {
            return Some(Signature { params: Vec::new(), from: "its PTX .entry" });
        };
        let list = &args[..args.find(')')?];
        let params = list.split(',').filter(|p| !p.trim().is_empty()).map(parse_ptx_param).collect::<Option<_>>()?;
        return Some(Signature { params, from: "its PTX .entry" });
    }
    None
}

/// One `.param` of a PTX `.entry`: `.param .u64 name`, `.param .align 8 .b8 name[16]`, …
fn parse_ptx_param(p: &str) -> Option<Param> {
    let decl = p.split_whitespace().collect::<Vec<_>>().join(" ");
    let ty = p.split_whitespace().find(|w| {
        let w = w.trim_start_matches('.');
        matches!(w.chars().next(), Some('u' | 's' | 'f' | 'b')) && w[1..].parse::<usize>().is_ok()
    })?;
    let ty = ty.trim_start_matches('.');
    let bits: usize = ty[1..].parse().ok()?;
    let count = match (p.find('['), p.find(']')) {
        (Some(a), Some(b)) if a < b => p[a + 1..b].trim().parse().ok()?,
        _ => 1,
    };
    let float = match ty.as_bytes()[0] {
        b'f' => Some(true),
        b'u' | b's' => Some(false),
        _ => None,
    };
    Some(Param::Bytes { size: bits / 8 * count, float: if count == 1 { float } else { None }, decl })
}

/// Parameters of the given sizes (a cubin's, from the CUDA driver).
pub(super) fn from_sizes(sizes: &[usize]) -> Signature {
    let params = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| Param::Bytes { decl: format!("parameter {i} ({size} bytes)"), size, float: None })
        .collect();
    Signature { params, from: "the cubin's parameter info" }
}

fn bad(kernel: &str, reason: String) -> Error {
    Error::InvalidArgument { op: "launch", reason: format!("kernel {kernel:?}: {reason}") }
}

impl Signature {
    /// `Ok` when `args` fit the parameters (count, and each argument's kind, dtype or size).
    pub fn check(&self, kernel: &str, args: &[KernelArg]) -> Result<()> {
        if args.len() != self.params.len() {
            let list: Vec<String> = self.params.iter().map(|p| p.decl().to_owned()).collect();
            return Err(bad(
                kernel,
                format!(
                    "takes {} arguments ({}), per {}, but the launch gave {}",
                    self.params.len(),
                    list.join(", "),
                    self.from,
                    args.len()
                ),
            ));
        }
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            if let Some(why) = p.refuses(&a.0) {
                return Err(bad(kernel, format!("argument {i} ({}) {why}", p.decl())));
            }
        }
        Ok(())
    }
}

impl Param {
    fn decl(&self) -> &str {
        match self {
            Param::Tensor { decl, .. } | Param::Scalar { decl, .. } | Param::Bytes { decl, .. } => decl,
        }
    }

    /// Why `arg` does not fit this parameter, if it does not.
    fn refuses(&self, arg: &Arg) -> Option<String> {
        match (self, arg) {
            (Param::Tensor { dtype: Some(want), .. }, Arg::Tensor(t, _)) if t.dtype() != *want => {
                Some(format!("takes a {want:?} tensor, but was given a {:?} tensor", t.dtype()))
            }
            (Param::Tensor { .. }, Arg::Tensor(..)) => None,
            (Param::Tensor { .. }, Arg::Scalar(s)) => {
                Some(format!("takes a tensor (a pointer), but was given a `{}` scalar", s.ty))
            }
            (Param::Scalar { .. }, Arg::Tensor(t, _)) => {
                Some(format!("takes a scalar by value, but was given a {:?} tensor", t.dtype()))
            }
            (Param::Scalar { ty: Some(want), .. }, Arg::Scalar(s)) if s.ty != *want => {
                Some(format!("takes `{want}`, but was given `{}`", s.ty))
            }
            (Param::Scalar { .. }, Arg::Scalar(_)) => None,
            (Param::Bytes { size, float, .. }, Arg::Tensor(t, _)) => (*size != 8 || *float == Some(true))
                .then(|| format!("is not a pointer (8 bytes), but was given a {:?} tensor", t.dtype())),
            (Param::Bytes { size, float, .. }, Arg::Scalar(s)) => {
                let is_float = matches!(s.ty, "float" | "double");
                // A 1- or 2-byte integer parameter (`bool`, `short`) takes an integer scalar: the
                // driver reads its low bytes (no scalar type is that small).
                let narrow = *size < 4 && !is_float && *float != Some(true);
                if *size != s.len as usize && !narrow {
                    Some(format!("has {size} bytes, but was given `{}` ({} bytes)", s.ty, s.len))
                } else if float.is_some_and(|f| f != is_float) {
                    let kind = if is_float { "integer" } else { "floating-point" };
                    Some(format!("is {kind}, but was given `{}`", s.ty))
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(src: &str, name: &str) -> Option<Vec<Param>> {
        from_cuda_c("", src, name).map(|s| s.params)
    }

    fn tensor(decl: &str, dtype: Option<DType>) -> Param {
        Param::Tensor { decl: decl.into(), dtype }
    }

    fn scalar(decl: &str, ty: Option<&'static str>) -> Param {
        Param::Scalar { decl: decl.into(), ty }
    }

    #[test]
    fn cuda_c_declarations_are_read() {
        let src = r#"
            // saxpy(x) is not this
            extern "C" __global__ void __launch_bounds__(256) other(int* p) {}
            extern "C" __global__ void saxpy(const float* __restrict__ x, float *y, float a,
                                             unsigned int n, long long m, __nv_bfloat16* b,
                                             void* any, MyType* mine, unsigned long long big) {}
        "#;
        assert_eq!(
            c(src, "saxpy"),
            Some(vec![
                tensor("const float* __restrict__ x", Some(DType::F32)),
                tensor("float *y", Some(DType::F32)),
                scalar("float a", Some("float")),
                scalar("unsigned int n", Some("unsigned int")),
                scalar("long long m", Some("long long")),
                tensor("__nv_bfloat16* b", Some(DType::BF16)),
                tensor("void* any", None),
                tensor("MyType* mine", None),
                scalar("unsigned long long big", Some("unsigned long long")),
            ])
        );
        assert_eq!(c("extern \"C\" __global__ void k() {}", "k"), Some(vec![]));
        assert_eq!(c("extern \"C\" __global__ void k(void) {}", "k"), Some(vec![]));
        assert_eq!(
            c("__global__ void k(int, float*) {}", "k"),
            Some(vec![scalar("int", Some("int")), tensor("float*", Some(DType::F32))])
        );
        assert_eq!(c("__global__ void k(signed n, unsigned m) {}", "k").map(|p| p.len()), Some(2));
    }

    #[test]
    fn what_cannot_be_read_with_certainty_is_not_checked() {
        assert_eq!(c("template <typename T> __global__ void k(T* x) {}", "k"), None);
        assert_eq!(c("#define REAL float\n__global__ void k(REAL* x) {}", "k"), None);
        assert_eq!(c("#define ARGS float* x\n__global__ void k(ARGS) {}", "k"), None);
        assert_eq!(c("__global__ void k(float* x) {}\n__global__ void k(double* x) {}", "k"), None);
        assert_eq!(c("__device__ void k(float* x) {}", "k"), None, "not a kernel");
        assert_eq!(
            from_cuda_c("#define N 4\n", "__global__ void k(float* x) { x[0] = N; }", "k").map(|s| s.params.len()),
            Some(1)
        );
    }

    #[test]
    fn ptx_entries_are_read() {
        let ptx = "
.visible .entry other(.param .u32 other_param_0) { ret; }
.visible .entry saxpy(
	.param .u64 .ptr .global .align 4 saxpy_param_0,
	.param .u64 saxpy_param_1,
	.param .f32 saxpy_param_2,
	.param .u32 saxpy_param_3,
	.param .align 8 .b8 saxpy_param_4[16]
)
{ ret; }
.visible .entry none()
{ ret; }";
        let p = from_ptx(ptx, "saxpy").unwrap().params;
        let sizes: Vec<(usize, Option<bool>)> = p
            .iter()
            .map(|p| match p {
                Param::Bytes { size, float, .. } => (*size, *float),
                _ => panic!("{p:?}"),
            })
            .collect();
        assert_eq!(sizes, [(8, Some(false)), (8, Some(false)), (4, Some(true)), (4, Some(false)), (16, None)]);
        assert_eq!(from_ptx(ptx, "none").unwrap().params, vec![]);
        assert_eq!(from_ptx(ptx, "other").unwrap().params.len(), 1);
        assert!(from_ptx(ptx, "sax").is_none() && from_ptx(ptx, "missing").is_none());
    }
}
