//! First contact with the crate: the closure helpers (`with_device`, `with_stream`,
//! `use_mem_pool`, `graph`) take closures returning a program's own error type, so `?` works
//! inside them on cudasem's errors and on the program's; and cudasem's `Error` goes into
//! `Box<dyn std::error::Error>` with `?`.

mod common;

use common::TestRng;
use cudasem::cuda::{self, CUDAGraph, GraphOptions, MemPool, Stream};
use cudasem::{DType, Tensor};

/// A program's own error type: cudasem's errors and its own parse errors.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read by `Debug`
enum AppError {
    Cuda(cudasem::Error),
    Parse(std::num::ParseIntError),
}

impl From<cudasem::Error> for AppError {
    fn from(e: cudasem::Error) -> Self {
        AppError::Cuda(e)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

fn values(rng: &mut TestRng, n: usize) -> Vec<String> {
    (0..n).map(|_| (rng.next_u64() % 1000).to_string()).collect()
}

#[test]
fn closure_helpers_take_a_programs_own_error_type() -> Result<(), AppError> {
    let mut rng = TestRng::new(36);
    let text = values(&mut rng, 8);
    let want: Vec<f32> = text.iter().map(|t| t.parse::<u32>().unwrap() as f32 * 2.0).collect();
    let last = cuda::device_count() - 1;
    let parse_and_double = || -> Result<Vec<f32>, AppError> {
        let parsed: Vec<f32> =
            text.iter().map(|t| Ok::<_, AppError>(t.parse::<u32>()? as f32)).collect::<Result<_, _>>()?;
        let t = Tensor::from_slice(&parsed, [parsed.len()], "cuda")?;
        Ok((&t * 2.0)?.to_vec::<f32>()?)
    };
    assert_eq!(cuda::with_device(last, parse_and_double)?, want);
    let s = Stream::new(Some(last), 0)?;
    assert_eq!(cuda::with_stream(&s, parse_and_double)?, want);
    let pool = MemPool::new()?;
    assert_eq!(cuda::use_mem_pool(&pool, parse_and_double)?, want);

    // The program's own error comes back as it was, through each helper.
    let bad = || -> Result<u32, AppError> { Ok("12x".parse::<u32>()?) };
    assert!(matches!(cuda::with_device(last, bad), Err(AppError::Parse(_))));
    assert!(matches!(cuda::with_stream(&s, bad), Err(AppError::Parse(_))));
    assert!(matches!(cuda::use_mem_pool(&pool, bad), Err(AppError::Parse(_))));
    // cudasem's errors of the call itself come back converted.
    let r = cuda::with_device(cuda::device_count() + 3, || Ok::<_, AppError>(1));
    assert!(matches!(r, Err(AppError::Cuda(cudasem::Error::InvalidDevice { .. }))), "{r:?}");

    // graph: a capture whose closure uses `?` on both kinds of error.
    let x = Tensor::from_slice(&want, [want.len()], "cuda")?;
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || -> Result<Tensor, AppError> {
        let k: u32 = "3".parse()?;
        Ok(x.mul(k as f64)?)
    })?;
    g.replay()?;
    let got = y.to_vec::<f32>()?;
    assert_eq!(got, want.iter().map(|v| v * 3.0).collect::<Vec<_>>());
    let mut g2 = CUDAGraph::new();
    let r = cuda::graph(&mut g2, GraphOptions::default(), || -> Result<Tensor, AppError> {
        x.mul(2.0)?;
        Ok(x.mul("two".parse::<u32>()? as f64)?)
    });
    assert!(matches!(r, Err(AppError::Parse(_))), "{r:?}");
    Ok(())
}

#[test]
fn cudasem_errors_go_into_boxed_errors_with_question_mark() {
    fn run() -> Result<f32, Box<dyn std::error::Error + Send + Sync>> {
        let t = Tensor::zeros([2, 3], DType::F32, "cuda")?;
        let n: usize = "4".parse()?;
        let bad = Tensor::zeros([n], DType::F32, "cuda")?;
        Ok((&t + &bad)?.sum_all()?.item::<f32>()?)
    }
    let e = run().unwrap_err();
    let e = e.downcast::<cudasem::Error>().expect("cudasem's error, boxed");
    assert!(matches!(*e, cudasem::Error::ShapeMismatch { .. }), "{e:?}");
    assert!(format!("{e:?}").starts_with("ShapeMismatch: "), "{e:?}");
}
