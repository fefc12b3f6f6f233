//! The jiterator on the simulated machine without a C++ compiler: `CXX` names a program that
//! does not exist, so a call is `Error::Unsupported` saying so, and the runtime goes on. (A test
//! binary of its own: it changes the process's environment.) On a GPU the function is compiled
//! by NVRTC and the host's compiler is not needed: the same call succeeds.

use cudasem::cuda::{self, jiterator};
use cudasem::{Error, Result, Tensor};

#[test]
fn a_missing_compiler_is_a_typed_error_on_the_simulated_machine() -> Result<()> {
    std::env::set_var("CXX", "/nonexistent/cudasem-no-such-c++");
    let code = format!("template <typename T> T twice_{}(T x) {{ return x + x; }}", std::process::id());
    let f = jiterator::create_jit_fn(&code, &[])?;
    let x = Tensor::from_slice(&[1.5f32, -2.0, 3.25], [3], "cuda")?;
    match f.call(&[&x], &[]) {
        Err(Error::Unsupported { reason, .. }) if cuda::driver_name() == "sim" => {
            assert!(reason.contains("cudasem-no-such-c++") && reason.contains("CXX"), "{reason}");
        }
        Ok(y) if cuda::driver_name() == "cuda" => assert_eq!(y.to_vec::<f32>()?, [3.0, -4.0, 6.5]),
        other => panic!("on {}: {other:?}", cuda::driver_name()),
    }
    // The runtime goes on: a built-in op, and the jiterator once a compiler is there again.
    assert_eq!(x.add(&x)?.to_vec::<f32>()?, [3.0, -4.0, 6.5]);
    std::env::remove_var("CXX");
    assert_eq!(f.call(&[&x], &[])?.to_vec::<f32>()?, [3.0, -4.0, 6.5]);
    Ok(())
}
