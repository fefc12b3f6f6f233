//! cudasem's `tracing` events in a subscriber of one's own: the caching allocator's segments
//! (`cudasem::alloc`: allocated, freed, `empty_cache`, out of memory with PyTorch's message) and
//! a CUDA graph's capture (`cudasem::graph`), printed by `tracing-subscriber`'s `fmt` layer and
//! collected by a small layer that checks they all arrived. Without a subscriber the events cost
//! nothing (each callsite is one load of `tracing`'s interest), and cudasem prints nothing.
//!
//! `cargo run --example tracing_events`: on the simulated machine or a real GPU. Exits non-zero if
//! an expected event is missing.
use cudasem::cuda::{self, CUDAGraph, GraphOptions};
use cudasem::{DType, Error, Tensor};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Keeps `target: message` of each cudasem event.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Seen {
    fn on_event(&self, e: &Event<'_>, _: Context<'_, S>) {
        let mut m = Message(String::new());
        e.record(&mut m);
        let line = format!("{}: {}", e.metadata().target(), m.0);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seen = Seen::default();
    let fmt = tracing_subscriber::fmt::layer().with_target(true).with_writer(std::io::stdout);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(fmt).with(seen.clone()))?;

    // 48 MiB: a segment of its own, then given back by empty_cache.
    let big = Tensor::ones([12 << 20], DType::F32, "cuda")?;
    let small = Tensor::full([256], 2.0, DType::F32, "cuda")?;
    let sum = big.sum_all()?.item::<f32>()? + small.sum_all()?.item::<f32>()?;
    drop(big);
    cuda::empty_cache()?;
    // A request beyond the device: a typed error, and a warning event with its message.
    let (_, total) = cuda::mem_get_info(None)?;
    match Tensor::zeros([total], DType::F32, "cuda") {
        Err(Error::OutOfMemory { requested, .. }) => println!("out of memory as expected ({requested} bytes)"),
        other => return Err(format!("expected OutOfMemory, got {other:?}").into()),
    }
    // A graph's capture.
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || small.mul(3.0))?;
    g.replay()?;
    let replayed = y.to_vec::<f32>()?;

    let lines = seen.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let expected = [
        "cudasem::alloc: segment allocated",
        "cudasem::alloc: segment freed",
        "cudasem::alloc: empty_cache released",
        "cudasem::alloc: out of memory: CUDA out of memory. Tried to allocate",
        "cudasem::graph: graph capture began",
        "cudasem::graph: graph capture ended",
    ];
    let missing: Vec<&str> = expected.iter().copied().filter(|e| !lines.iter().any(|l| l.starts_with(e))).collect();
    let values_ok = sum == (12 << 20) as f32 + 512.0 && replayed == [6.0; 256];
    println!("\n{} cudasem events; every expected kind arrived: {}", lines.len(), missing.is_empty());
    if !missing.is_empty() || !values_ok {
        return Err(format!("missing events {missing:?} (values right: {values_ok})").into());
    }
    Ok(())
}
