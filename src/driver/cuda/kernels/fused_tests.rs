//! The fused modules (norm rows, attention) compile through NVRTC for every float dtype (to
//! device code for compute capability 9.0: shared-memory tiles within the static limit, register
//! arrays of every padded head dim), and each entry point the launcher asks for is defined.

use super::nvrtc::{image, nvrtc_present, Program};
use super::vocab::{attn_keys_per_tile, ModuleKey, ATTN_HEAD_DIMS};
use crate::dtype::DType;

const FLOATS: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::F64];

#[test]
fn norm_and_attention_modules_compile() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    for d in FLOATS {
        for m in [ModuleKey::Norm { dtype: d }, ModuleKey::Attention { dtype: d }] {
            let src = m.source();
            for e in m.entries() {
                let name = e.name(&m);
                assert!(src.contains(&format!(" {name}(const __grid_constant__")), "{m:?} defines {name}");
            }
            if let Err(e) = image(&Program::tensor(&src), 9, 0, None) {
                panic!("{m:?} does not compile: {e}\n{src}");
            }
        }
    }
}

#[test]
fn attention_tiles_fit_static_shared_memory() {
    for ep in ATTN_HEAD_DIMS {
        for acc in [4usize, 8] {
            let kt = attn_keys_per_tile(ep, acc);
            assert!(32 % kt == 0 && kt >= 4, "{kt} keys per tile divide a warp");
            // Keys (padded by one), values and eight queries.
            let bytes = (kt * (ep + 1) + kt * ep + 8 * ep) * acc;
            assert!(bytes <= 48 * 1024, "head dim {ep}, {acc}-byte accumulators: {bytes} bytes");
        }
    }
}
