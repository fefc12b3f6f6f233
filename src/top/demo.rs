//! A demo workload for `cudasem top` on the simulated machine: one background thread per device
//! that allocates tensors of varying sizes, multiplies and reduces them in bursts with pauses
//! between, and frees the oldest, so that utilization, memory traffic, the allocator's figures
//! and its segments move.

use crate::cuda;
use crate::error::{Error, Result};
use crate::{DType, Tensor};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The running demo workload; dropping it stops its threads and waits for them.
#[derive(Debug)]
pub struct Demo {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    error: Arc<Mutex<Option<Error>>>,
}

impl Demo {
    /// Starts one thread per device. Errors: the runtime cannot start, or a thread cannot.
    pub fn start() -> Result<Demo> {
        let n = cuda::device_count();
        if n == 0 {
            cuda::current_device()?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let mut threads = Vec::with_capacity(n);
        for device in 0..n {
            let (stop, error) = (stop.clone(), error.clone());
            let t = std::thread::Builder::new().name(format!("cudasem-top-demo-{device}")).spawn(move || {
                if let Err(e) = work(device, &stop) {
                    error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                }
            });
            let t = t.map_err(|e| Error::Internal {
                op: "top::Demo::start",
                reason: format!("the demo's thread for cuda:{device} could not start: {e}"),
            })?;
            threads.push(t);
        }
        Ok(Demo { stop, threads, error })
    }

    /// The first error a demo thread stopped on, if any (the thread stops; the others go on).
    pub fn error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A small generator of the workload's sizes and pauses (xorshift).
struct Dice(u64);

impl Dice {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Bursts of work on `device` until `stop`: each burst allocates a buffer of 1 to 64 MiB (left
/// unwritten: it moves the allocator's figures, not the clocks), fills a 64 KiB to 1 MiB tensor
/// with random numbers, multiplies two 128x128 matrices a few times and reduces, keeps at most
/// 8 buffers alive, then pauses for 20 to 300 ms.
fn work(device: usize, stop: &AtomicBool) -> Result<()> {
    let place = format!("cuda:{device}");
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (device as u64 + 1));
    let mut live: VecDeque<Tensor> = VecDeque::new();
    let a = Tensor::randn([128, 128], DType::F32, place.as_str())?;
    while !stop.load(Ordering::Relaxed) {
        live.push_back(Tensor::empty([(1usize << 20) << dice.next(7)], DType::U8, place.as_str())?);
        live.push_back(Tensor::randn([64usize << dice.next(5), 256], DType::F32, place.as_str())?);
        for _ in 0..1 + dice.next(3) {
            live.push_back(a.matmul(&a)?.sum(&[], false)?);
        }
        while live.len() > 8 {
            live.pop_front();
        }
        cuda::synchronize(device)?;
        std::thread::sleep(Duration::from_millis(20 + dice.next(280)));
    }
    Ok(())
}
